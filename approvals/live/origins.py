"""Websocket origin check: only pages of this site (same scheme, host and port) may open a socket.

Channels' ``AllowedHostsOriginValidator`` compares only the host with ``ALLOWED_HOSTS``, so a page on
``http://127.0.0.1:9999`` (any local process) could open an authenticated socket with the reviewer's
cookie. Here the ``Origin`` must be the socket's own origin (its ``Host`` header, validated against
``ALLOWED_HOSTS``, with the scheme the browser used), or one of ``settings.LIVE_TRUSTED_ORIGINS``
(default: ``CSRF_TRUSTED_ORIGINS``), the same list Django trusts for form posts.
"""

from __future__ import annotations

from typing import Any

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

Scope = dict[str, Any]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            try:
                return str(value.decode("latin-1"))
            except (AttributeError, UnicodeDecodeError):
                return None
    return None


def _secure(scope: Scope) -> bool:
    """Whether the browser used TLS: the socket's scheme, or the proxy's header when trusted."""
    if scope.get("scheme") in ("wss", "https"):
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        meta_name, expected = proxy
        header = meta_name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
        return bool(_header(scope, header) == expected)
    return False


def site_origin(scope: Scope) -> str | None:
    """The origin a page of this site has when it opens this socket, if the host is allowed."""
    host = _header(scope, b"host")
    if not host:
        return None
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    scheme = "https" if _secure(scope) else "http"
    default_port = ":443" if scheme == "https" else ":80"
    return f"{scheme}://{host.lower().removesuffix(default_port)}"


def origin_allowed(scope: Scope) -> bool:
    origin = _header(scope, b"origin")
    if not origin:
        return False
    origin = origin.lower().rstrip("/")
    if origin.endswith((":80", ":443")):
        scheme, _, rest = origin.partition("://")
        if (scheme, rest.rsplit(":", 1)[1]) in (("http", "80"), ("https", "443")):
            origin = f"{scheme}://{rest.rsplit(':', 1)[0]}"
    trusted = getattr(settings, "LIVE_TRUSTED_ORIGINS", None)
    if trusted is None:
        trusted = getattr(settings, "CSRF_TRUSTED_ORIGINS", [])
    if origin in {o.lower().rstrip("/") for o in trusted}:
        return True
    return origin == site_origin(scope)


class SameOriginValidator:
    """ASGI middleware: refuse websocket handshakes from any other origin (403, before the app)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.application(scope, receive, send)
