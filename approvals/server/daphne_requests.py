"""Daphne's request class, swapped once at start-up for a subclass that bounds what one client can
make the process hold: Twisted's parse of POST bodies, bodies of any size, unread pipelined answers.
Each is an attack on a Daphne served directly (``make run``; in production nginx bounds bodies and
does not pipeline, ``deploy/nginx.conf``), measured in docs/scaling.md ("Daphne served directly").

- **Bodies left to Django.** Twisted's ``Request.requestReceived`` parses every url-encoded or
  multipart POST body into ``request.args`` before Daphne sees the request, on the event loop and
  whatever its size. Daphne never reads ``args``: it hands the body on to the ASGI app, where Django
  parses it on a thread, within ``DATA_UPLOAD_MAX_MEMORY_SIZE`` and ``DATA_UPLOAD_MAX_NUMBER_FIELDS``.
  One anonymous form of a few megabytes held every page, socket and decision of the process for
  seconds. Twisted's ``Request`` takes ``parsePOSTFormSubmission=False`` for servers like this one;
  Daphne builds its requests without it. Delete when Daphne passes it itself.
- **Bodies bounded.** Twisted takes a body of any length (with ``Content-Length`` or chunked) into a
  temporary file; Daphne reads all of it into memory on the event loop; Django copies it again
  before any limit of Django's sees it. No body longer than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is taken
  here (the app takes no file uploads: Django would refuse it anyway), nor one cut into pieces of
  under ``MIN_PIECE_BYTES`` on average (decoding one-byte chunks is most of a process's CPU for
  seconds). Such a request is answered ``413`` as soon as it is over and its connection closed,
  before Daphne or Django hear of it. Delete when Daphne bounds request bodies (4.2 cannot).
- **Pipelined answers held.** A client may send many requests on one connection before reading any
  answer. Twisted stops reading the connection once its send buffer is full, but the requests it has
  read already are each handed to Daphne as soon as the one before is finished, and Daphne writes an
  answer into that buffer whatever it holds: a few kilobytes of requests held hundreds of times their
  size in answers. Here a request whose connection's send buffer is full when its answer is complete
  waits to finish (and so the next one to start) until the client takes the bytes (Twisted tells the
  request, as a producer registered with its channel). A client that takes nothing for
  ``HTTPChannel.timeOut`` seconds has its connection aborted, as Twisted's own idle timeout does with
  a finished one. Delete when Daphne or Twisted hold pipelined requests while the send buffer is full
  (neither does in Daphne 4.2 / Twisted 26.10).
"""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings

#: A body may be cut into pieces (chunks, or the network's reads) of this many bytes on average, and
#: into ``MIN_PIECES`` pieces whatever their size.
MIN_PIECE_BYTES = 256
MIN_PIECES = 1024


def max_body_bytes() -> int | None:
    """The longest request body taken: Django's own limit on what it reads (None: no limit)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return None if limit is None else int(limit)


def over_the_limit(body_bytes: int, pieces: int) -> str | None:
    """Why a body of ``body_bytes`` so far, in ``pieces``, is refused (None: not refused yet)."""
    limit = max_body_bytes()
    if limit is None:
        return None
    if body_bytes > limit:
        return f"The request body is over {limit} bytes."
    if pieces > max(MIN_PIECES, limit // MIN_PIECE_BYTES):
        return f"The request body comes in pieces of under {MIN_PIECE_BYTES} bytes."
    return None


def _refusal(reason: str) -> bytes:
    body = f"{reason}\n".encode()
    head = (
        "HTTP/1.1 413 Content Too Large\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


#: Seconds a finished answer may wait for the client to take it, when the channel has no timeout.
DEFAULT_DRAIN_SECONDS = 60.0


class _Drain:
    """A streaming producer on a request's channel (Twisted's ``IPushProducer``): told when the send
    buffer fills and empties."""

    def __init__(self, request: Any) -> None:
        self.request = request
        self.paused = False
        self.finish_pending = False
        self.deadline: Any = None

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        if self.finish_pending:
            self.finish_pending = False
            if self.deadline is not None and self.deadline.active():
                self.deadline.cancel()
            self.request.finish()

    def stopProducing(self) -> None:
        if self.deadline is not None and self.deadline.active():
            self.deadline.cancel()

    def holds_finish(self) -> bool:
        """Whether the request's finish waits for the client to take what the send buffer holds
        (if not, this producer is unregistered from the channel)."""
        request = self.request
        if request.channel is None or request._disconnected or request.finished:
            return False
        if self.finish_pending:
            return True
        if self.paused:
            self.finish_pending = True
            seconds = getattr(request.channel, "timeOut", None) or DEFAULT_DRAIN_SECONDS
            # (Daphne's reactor, installed by the time a request finishes: not imported at start-up.)
            from twisted.internet import reactor

            self.deadline = cast(Any, reactor).callLater(seconds, self.give_up)
            return True
        if request.producer is self:
            request.unregisterProducer()
        return False

    def give_up(self) -> None:
        """The client took nothing for too long: its connection goes."""
        channel = self.request.channel
        if self.finish_pending and channel is not None and channel.transport is not None:
            channel.transport.abortConnection()


#: What ``BoundedRequest`` is mixed into (by ``install``): Daphne's ``WebRequest``, which mypy cannot see.
_Request: Any = object


class BoundedRequest(_Request):  # type: ignore[misc]
    """Daphne's ``WebRequest`` with its body and its answer bounded (``install`` puts it first)."""

    bounded = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.body_bytes = 0
        self.body_pieces = 0
        self.refused = False
        super().__init__(*args, **kwargs, parsePOSTFormSubmission=False)

    # -- the body ------------------------------------------------------------------------------

    def gotLength(self, length: int | None) -> None:
        """Headers read: a body announced over the limit is refused before any of it is read."""
        super().gotLength(length)
        reason = None if length is None else over_the_limit(length, 1)
        if reason is not None:
            # (No "100 Continue" after the refusal: Twisted sends it just after this call.)
            self.requestHeaders.removeHeader(b"Expect")
            self._refuse(reason)

    def handleContentChunk(self, data: bytes) -> None:
        if self.refused:
            return  # what the connection had read already before it closed
        self.body_bytes += len(data)
        self.body_pieces += 1
        reason = over_the_limit(self.body_bytes, self.body_pieces)
        if reason is not None:
            self._refuse(reason)
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self.refused:
            return  # answered already: nothing reaches Daphne or the app
        super().requestReceived(command, path, version)

    def _refuse(self, reason: str) -> None:
        self.refused = True
        self.channel.transport.write(_refusal(reason))
        self.channel.loseConnection()

    # -- the answer ----------------------------------------------------------------------------

    def handle_reply(self, message: dict[str, Any]) -> None:
        if (
            message.get("type") == "http.response.start"
            and self.channel is not None
            and self.producer is None
            and not self.finished
        ):
            self.drain = _Drain(self)
            self.registerProducer(self.drain, True)
        super().handle_reply(message)

    def finish(self) -> None:
        drain: _Drain | None = getattr(self, "drain", None)
        if drain is not None and drain.holds_finish():
            return  # finished when the send buffer empties (``_Drain.resumeProducing``)
        super().finish()

    def connectionLost(self, reason: Any) -> None:
        drain: _Drain | None = getattr(self, "drain", None)
        if drain is not None:
            drain.finish_pending = False
            drain.stopProducing()
        super().connectionLost(reason)


def install() -> None:
    """Daphne's requests from now on are ``BoundedRequest`` (nothing without Daphne)."""
    try:
        from daphne import http_protocol  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - another server
        return
    if not getattr(http_protocol.WebRequest, "bounded", False):
        # ``HTTPFactory.buildProtocol`` reads the module's name for each connection it builds.
        http_protocol.WebRequest = type("WebRequest", (BoundedRequest, http_protocol.WebRequest), {})
