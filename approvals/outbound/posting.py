"""Where the server may POST to on a user's word (webhook endpoints, chat hooks), and the POST itself.

Whoever registers a URL makes the server send requests to it. Pointed at this machine, its network
or a cloud's metadata service (169.254.169.254), that would be a way in, so a URL whose address is
not a global one (loopback, private, link-local, shared, reserved, multicast) is refused, unless
``COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS`` says the receivers are internal:

* when it is saved (``refused_as_typed``: a literal address in any spelling, ``localhost``);
* when it is sent to (``post``): the name is resolved, every address it resolves to is checked, and
  the connection goes to one of those very addresses, so a name that resolves differently a moment
  later (DNS rebinding) gets nothing. TLS still checks the certificate against the URL's host name.

Chat URLs must be ``https`` unless that same setting is on. Redirects are never followed: a redirect is
an answer, and following it would send the request to an address no check has seen.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

ALLOW_SETTING = "COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS"

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(ValueError):
    """The URL's address may not be sent to (the message says why and what would allow it)."""


def private_allowed() -> bool:
    """Webhooks and chat hooks may point at internal addresses, and chat hooks may be plain http."""
    return bool(getattr(settings, ALLOW_SETTING, False))


def _refusal(what: str, shown: str) -> str:
    return (
        f"{what} may not point at this machine, a private network or a link-local address ({shown}); "
        f"set {ALLOW_SETTING} if its receivers are meant to be internal."
    )


def _internal(ip: _Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return not ip.is_global or ip.is_multicast or ip.is_unspecified


def _literal(host: str) -> _Address | None:
    """``host`` as the address it spells, in any spelling a resolver accepts (``127.1``,
    ``2130706433``, ``0x7f.0.0.1``, ``[::1]``); None for a name."""
    host = host.split("%", 1)[0]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def refused_as_typed(url: str, *, what: str = "Webhooks", https_only: bool = False) -> str:
    """Why ``url`` may not be saved as written, else "": not http(s) (``https_only``: not https, unless
    internal receivers are allowed), no host, a user name or password, or an internal address."""
    parts = urlsplit(url)
    allowed = private_allowed()
    if parts.scheme not in {"http", "https"}:
        return f"{what} need an http:// or https:// address."
    if https_only and parts.scheme != "https" and not allowed:
        return f"Use an https:// address. (Plain http only with {ALLOW_SETTING}.)"
    if parts.username or parts.password:
        return "Leave the user name and password out of the address."
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        return f"{what} need an address with a host name."
    if allowed:
        return ""
    address = _literal(host)
    if host == "localhost" or host.endswith(".localhost") or (address is not None and _internal(address)):
        return _refusal(what, host)
    return ""


def checked_addresses(host: str, port: int, *, what: str = "Webhooks") -> list[str]:
    """The addresses ``host`` resolves to now, each one checked; ``Refused`` if any is internal (one
    bad answer is enough: a resolver may hand out either) or the name does not resolve."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"Cannot resolve {host}: {exc}") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    if not private_allowed():
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            if _internal(ip):
                raise Refused(_refusal(what, f"{host} resolves to {address}"))
    return addresses


def post(
    url: str, body: bytes, headers: dict[str, str], timeout: float, *, what: str = "Webhooks"
) -> tuple[int | None, str]:
    """One POST to ``url``, connected to an address checked as it was resolved; ``(status, error)``,
    the error empty on a 2xx. A 3xx is an error (not followed)."""
    parts = urlsplit(url)
    refused = refused_as_typed(url, what=what)
    if refused:
        return None, refused
    host = parts.hostname or ""
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    try:
        addresses = checked_addresses(host, port, what=what)
    except (Refused, ValueError) as exc:
        return None, str(exc)[:1000]
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    error = "no address"
    for address in addresses:
        connection = _pinned(host, port, address, secure=secure, timeout=timeout)
        try:
            try:
                connection.connect()
            except OSError as exc:
                error = f"{type(exc).__name__}: {exc}"[:1000]
                continue  # the next address the name resolved to
            try:
                connection.request("POST", target, body=body, headers=headers)
                response = connection.getresponse()
                code = int(response.status)
                response.read(65536)  # (the answer is not kept; a little is read so it can close)
            except (OSError, http.client.HTTPException) as exc:
                return None, f"{type(exc).__name__}: {exc}"[:1000]
        finally:
            connection.close()
        return code, "" if 200 <= code < 300 else f"HTTP {code}"
    return None, error


def _pinned(
    host: str, port: int, address: str, *, secure: bool, timeout: float
) -> http.client.HTTPConnection:
    """A connection for ``host`` (its Host header, and TLS's server name and certificate check) that
    connects to ``address`` only."""
    connection: http.client.HTTPConnection
    if secure:
        connection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ssl.create_default_context()
        )
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)

    def connect_to_checked(_where: Any, *args: Any, **kwargs: Any) -> socket.socket:
        return socket.create_connection((address, port), *args, **kwargs)

    connection._create_connection = connect_to_checked  # type: ignore[attr-defined]
    return connection
