"""Daphne's requests, each finished only once the client has taken its response's bytes.

A client may send many requests on one connection before reading any answer (HTTP/1.1 pipelining).
Twisted stops reading the connection once its send buffer is full, but the requests it has read
already are each handed to Daphne as soon as the one before is finished, and Daphne writes an answer
into that buffer whatever it holds. So 45 KB of pipelined ``GET /static/...app.css`` (1,000 requests),
never read, made the process hold each 37 KB answer: ten such anonymous connections held 290 MB
(about 650 times what they sent) and cost 12 s of CPU, a thousand of them would exhaust memory.

Here a request whose connection's send buffer is full when its answer is complete waits to finish,
and so the next request on that connection waits to start, until the client takes the bytes (Twisted
tells the request, as a producer registered with its channel). A client that takes nothing for
``HTTPChannel.timeOut`` seconds (60) has its connection aborted, as Twisted's own idle timeout does
with a finished one. A connection then holds one answer, not all of them. Delete this module when
Daphne (or Twisted) holds pipelined requests while the send buffer is full (neither does in Daphne
4.2 / Twisted 26.10).
"""

from __future__ import annotations

from typing import Any, cast

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


def hold_pipelined_requests() -> None:
    """Daphne's requests from now on finish once their answer has left the send buffer (nothing
    without Daphne)."""
    try:
        from daphne import http_protocol  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - another server
        return
    if getattr(http_protocol.WebRequest, "holds_pipelined_requests", False):
        return

    class WebRequest(http_protocol.WebRequest):  # type: ignore[misc]
        holds_pipelined_requests = True

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

    # ``HTTPFactory.buildProtocol`` reads the module's name for each connection it builds.
    http_protocol.WebRequest = WebRequest
