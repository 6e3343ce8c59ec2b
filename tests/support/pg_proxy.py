"""A TCP proxy the test owns between a server and PostgreSQL, to take the database away and back.

``cut()`` is the database going down as a server sees it: every connection through the proxy is
closed, and new ones are accepted and never answered (a host that does not answer, the slow way to
fail), or with ``refuse=True`` closed at once (a stopped server). ``restore()`` forwards again. The
machine's PostgreSQL itself is never touched.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from urllib.parse import urlsplit, urlunsplit


class PostgresProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._down = False
        self._refuse = False
        self._stopped = False
        threading.Thread(target=self._accept, name="pg-proxy", daemon=True).start()

    def url_for(self, database_url: str) -> str:
        """``database_url`` through this proxy."""
        parts = urlsplit(database_url)
        netloc = parts.netloc.rsplit("@", 1)
        user = f"{netloc[0]}@" if len(netloc) == 2 else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def cut(self, *, refuse: bool = False) -> None:
        with self._lock:
            self._down, self._refuse = True, refuse
            self._close_all()

    def restore(self) -> None:
        with self._lock:
            self._down = False
            self._close_all()  # (the connections held unanswered)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._close_all()
        self.listener.close()

    def _close_all(self) -> None:
        for sock in self._open:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._open.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                if self._stopped:
                    client.close()
                    return
                if self._down and self._refuse:
                    client.close()
                    continue
                self._open.append(client)
                if self._down:
                    continue  # accepted, never answered
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.append(server)
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with suppress(OSError):
        target.shutdown(socket.SHUT_WR)


@contextmanager
def proxied(database_url: str) -> Iterator[PostgresProxy]:
    parts = urlsplit(database_url)
    proxy = PostgresProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    try:
        yield proxy
    finally:
        proxy.stop()
