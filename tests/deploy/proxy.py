"""A small TLS-terminating reverse proxy for the production-way test (stdlib asyncio, in a thread).

It does what docs/deploy.md asks of nginx: serves ``/static/`` from the collected files, passes every
other request to one of the app servers in turn (round robin, one request per upstream connection),
passes websocket upgrades through, and tells the app the browser used HTTPS (``X-Forwarded-Proto``)
and who the client was (``X-Forwarded-For``), replacing whatever the client sent in those headers.

``pin`` sends every new request to one upstream, so a test can say which server process serves what;
``log`` records which upstream got each request, ``errors`` the requests no upstream answered (the
browser gets a 502 for those, as from nginx, rather than a dropped connection it would retry).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import ipaddress
import itertools
import mimetypes
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

HEAD_LIMIT = 64 * 1024
# Hop-by-hop headers (RFC 9110 7.6.1) and the ones only the proxy may set.
DROPPED = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "forwarded",
}


@dataclass(frozen=True)
class Upstream:
    name: str
    port: int


@dataclass(frozen=True)
class Forwarded:
    upstream: str
    method: str
    path: str
    websocket: bool


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 and localhost; (certificate, key) paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "proxy.crt", directory / "proxy.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def _split_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    return lines[0], headers


def _join_head(first: str, headers: Sequence[tuple[str, str]]) -> bytes:
    return ("\r\n".join([first, *(f"{n}: {v}" for n, v in headers)]) + "\r\n\r\n").encode("latin-1")


def _header(headers: Sequence[tuple[str, str]], name: str) -> str:
    return next((v for n, v in headers if n.lower() == name), "")


@dataclass
class ReverseProxy:
    upstreams: list[Upstream]
    static_root: Path
    certificate: tuple[Path, Path]
    port: int = 0
    pin: str | None = None
    log: list[Forwarded] = field(default_factory=list)
    #: Upstreams that could not be reached or closed without answering, and the proxy's own failures.
    errors: list[str] = field(default_factory=list)
    _cycle: itertools.cycle[Upstream] | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.Server | None = None
    _thread: threading.Thread | None = None

    @property
    def origin(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Listen (on a free port unless one was given) in a thread of its own with its own event loop.

        Its own thread, not just its own loop: Playwright's sync API runs a loop in the test's thread.
        """
        self._cycle = itertools.cycle(self.upstreams)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(*map(str, self.certificate))
        loop = asyncio.new_event_loop()
        listening: concurrent.futures.Future[asyncio.Server] = concurrent.futures.Future()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                server = loop.run_until_complete(
                    asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=tls, limit=HEAD_LIMIT)
                )
            except BaseException as error:
                listening.set_exception(error)
                loop.close()
                return
            listening.set_result(server)
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=serve, name="reverse-proxy", daemon=True)
        self._thread.start()
        self._server = listening.result(timeout=10)
        self._loop = loop
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        if self._loop is None or self._server is None or self._thread is None:
            return
        loop, server = self._loop, self._server

        async def shut() -> None:
            server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await server.wait_closed()

        asyncio.run_coroutine_threadsafe(shut(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=10)
        self._loop = self._server = self._thread = None

    def served_by(self, path: str, *, websocket: bool = False) -> set[str]:
        """The upstreams that got a request for a path starting with ``path``."""
        return {f.upstream for f in self.log if f.path.startswith(path) and f.websocket == websocket}

    def _choose(self) -> Upstream:
        if self.pin is not None:
            return next(u for u in self.upstreams if u.name == self.pin)
        assert self._cycle is not None
        return next(self._cycle)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve_one(client_reader, client_writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ssl.SSLError):
            pass
        except Exception as error:
            self.errors.append(f"{type(error).__name__}: {error}")
            raise
        finally:
            client_writer.close()

    async def _serve_one(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        first, headers = _split_head((await client_reader.readuntil(b"\r\n\r\n"))[:-4])
        method, target, _version = first.split(" ", 2)
        if target.startswith("/static/") and method in {"GET", "HEAD"}:
            await self._static(target, method, client_writer)
            return
        websocket = _header(headers, "upgrade").lower() == "websocket"
        upstream = self._choose()
        self.log.append(Forwarded(upstream.name, method, target, websocket))
        peer = client_writer.get_extra_info("peername")[0]
        forwarded = [(n, v) for n, v in headers if n.lower() not in DROPPED]
        forwarded += [("X-Forwarded-Proto", "https"), ("X-Forwarded-For", peer)]
        # One request per upstream connection, so that the next one is routed afresh; an upgraded
        # connection stays with its upstream for its life.
        forwarded += (
            [("Connection", "Upgrade"), ("Upgrade", "websocket")] if websocket else [("Connection", "close")]
        )
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", upstream.port)
        except OSError as error:
            await self._bad_gateway(client_writer, f"{upstream.name} {method} {target}: {error!r}")
            return
        try:
            upstream_writer.write(_join_head(first, forwarded))
            await upstream_writer.drain()
            to_upstream = asyncio.create_task(self._pipe(client_reader, upstream_writer))
            try:
                head = await upstream_reader.readuntil(b"\r\n\r\n")
            except (ConnectionError, asyncio.IncompleteReadError) as error:
                await self._bad_gateway(client_writer, f"{upstream.name} {method} {target}: {error!r}")
                to_upstream.cancel()
                return
            status, response = _split_head(head[:-4])
            upgraded = status.split(" ")[1:2] == ["101"]
            if not upgraded:
                # The browser must not send its next request down a connection the upstream closes.
                response = [(n, v) for n, v in response if n.lower() not in {"connection", "keep-alive"}]
                response.append(("Connection", "close"))
            client_writer.write(_join_head(status, response))
            await client_writer.drain()
            to_client = asyncio.create_task(self._pipe(upstream_reader, client_writer))
            # A response ends when the upstream closes; a websocket when either side does.
            await asyncio.wait(
                {to_client, to_upstream} if upgraded else {to_client}, return_when=asyncio.FIRST_COMPLETED
            )
            to_client.cancel()
            to_upstream.cancel()
        finally:
            upstream_writer.close()

    async def _bad_gateway(self, writer: asyncio.StreamWriter, reason: str) -> None:
        """What nginx answers when the upstream cannot be reached or closes without answering."""
        self.errors.append(reason)
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(64 * 1024):
            writer.write(chunk)
            await writer.drain()

    async def _static(self, target: str, method: str, writer: asyncio.StreamWriter) -> None:
        root = self.static_root.resolve()
        path = (root / target.split("?", 1)[0].removeprefix("/static/")).resolve()
        if path.is_relative_to(root) and path.is_file():
            body = path.read_bytes()
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            head = f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
        else:
            body, head = b"", "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
        writer.write(
            f"{head}Connection: close\r\n\r\n".encode("latin-1") + (body if method == "GET" else b"")
        )
        await writer.drain()
