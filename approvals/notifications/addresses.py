"""Where a chat webhook may point: a user types the URL and the server POSTs to it, so an address on
this machine or inside its network (loopback, private, link-local: a cloud's metadata service) is
refused, when the URL is saved (a literal address, ``localhost``) and again before each send (every
address the name resolves to then), unless ``NOTIFY_CHAT_ALLOW_PRIVATE`` says the hooks are internal.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from approvals.notifications import options

REFUSED = "Chat webhooks may not point at this machine or a private network address."


def _internal(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    return not ip.is_global


def refused_as_typed(url: str) -> str:
    """Why ``url`` is refused as written (a literal internal address or ``localhost``), else ""."""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    if options.chat_private_allowed():
        return ""
    if host == "localhost" or host.endswith(".localhost") or _internal(host):
        return REFUSED
    return ""


def refused_as_resolved(url: str) -> str:
    """Why ``url`` is refused now that its name resolves (any internal address), else ""."""
    if options.chat_private_allowed():
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        found = socket.getaddrinfo(host, parts.port or 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        return f"Cannot resolve {host}: {exc}"
    if any(_internal(str(info[4][0])) for info in found):
        return REFUSED
    return refused_as_typed(url)
