"""The websocket that tells open pages what changed."""

from __future__ import annotations

import json
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import get_user_model

from agents_runtime.store import StoredRun
from agents_runtime.untrusted import reveal_invisible
from approvals import queries
from approvals.live import (
    agent_group,
    escalation_group,
    fanout,
    presence_group,
    relay,
    run_group,
    session_group,
)
from approvals.live.sessions import Login, login_of, session_watch
from approvals.policy import Access

UNAUTHENTICATED = 4401
#: Closes a socket that abuses the server (RFC 6455 "policy violation", not 1011 "server error"): it
#: keeps sending frames the server cannot use, or sends more than a page ever does.
POLICY_VIOLATION = 1008
#: Frames are small JSON objects; anything larger is refused unread.
MAX_FRAME_CHARS = 4096
#: How many unusable frames (or asks for unknown runs) a socket may send in a minute.
MAX_BAD_FRAMES = 20
#: How many runs one page may watch at once (``settings.LIVE_MAX_RUN_SUBSCRIPTIONS``).
DEFAULT_MAX_RUN_SUBSCRIPTIONS = 50
#: How many frames one socket may send in a minute (``settings.LIVE_MAX_FRAMES_PER_MINUTE``): a page
#: sends one or two each time a card opens, so a socket over it is not a page.
DEFAULT_MAX_FRAMES_PER_MINUTE = 240


def _usable_run_id(value: Any) -> bool:
    """A run id the store can look up: printable text (no NUL or control characters), valid UTF-8."""
    if not isinstance(value, str) or not value or len(value) > 200 or not value.isprintable():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


class _Minute:
    """Counts what happened in the last minute, against a limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.times: deque[float] = deque()

    def over(self) -> bool:
        """One more now: whether that makes more than the limit within a minute."""
        at = time.monotonic()
        while self.times and self.times[0] <= at - 60:
            self.times.popleft()
        self.times.append(at)
        return len(self.times) > self.limit


class LiveConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """Joins the groups of the agents the logged-in user may see; forwards their run events.

    A user who does not see every agent also hears of the calls escalated to their groups
    (``escalations_heard``): the events of those calls go to a group per escalation group as well
    (``live.escalation_group``), which such a page joins; of the agent's other calls it hears nothing.

    A page showing one run may also ask for that run's output: ``{"subscribe_run": "<run id>"}``,
    and a page showing a run's card says so with ``{"presence": "<run id>"}``: it then hears who
    else has that card open (``{"type": "presence", "run_id", "users"}``) as pages join and leave.
    Either is refused for a run the user may not see: of an agent they see only for its escalated
    calls, a run waiting on a call escalated to one of their groups is theirs, as on its page.
    Presence goes through the channel layer's group of the run (no table, no polling): a joining
    socket announces itself, the others answer "here", and a closing one says it leaves.
    The socket closes with 4401 when its session logs out (anywhere) and when the process's periodic
    re-check of its open sessions (``live.sessions``, every ``LIVE_SESSION_CHECK_SECONDS``) finds the
    session gone or its user unable to log in; the same re-check follows changes to which agents the
    user may see and to the groups they are in.
    """

    agent_ids: list[str]
    #: The groups whose escalated calls this page hears of, and their live groups.
    escalations: tuple[str, ...] = ()
    escalation_groups: frozenset[str] = frozenset()
    joined: list[str]
    #: The runs this page watches, with their agents.
    runs: dict[str, str]
    session_key = ""
    user_pk: Any = None
    accepted = False
    signed_out = False
    #: The frames of the last minute, and the unusable ones among them.
    frames: _Minute
    bad_frames: _Minute
    #: Presence: the runs whose card this page shows (with their agents), and who else has each open
    #: (other sockets' keys -> usernames).
    present: dict[str, str]
    others: dict[str, dict[str, str]]
    member_key = ""
    username = ""

    async def connect(self) -> None:
        self.agent_ids, self.joined, self.runs = [], [], {}
        self.present, self.others = {}, {}
        limit = int(getattr(settings, "LIVE_MAX_FRAMES_PER_MINUTE", DEFAULT_MAX_FRAMES_PER_MINUTE))
        self.frames, self.bad_frames = _Minute(limit), _Minute(MAX_BAD_FRAMES)
        self.member_key = uuid.uuid4().hex
        user = self.scope.get("user")
        session = self.scope.get("session")
        self.session_key = (session.session_key if session is not None else None) or ""
        if user is None or not user.is_authenticated or not self.session_key:
            # Accept, then close: a socket refused at the handshake reaches the page as 1006 (the
            # server answers 403), which looks like a network problem and would be retried forever.
            await self.accept()
            await self.close(code=UNAUTHENTICATED)
            return
        self.user_pk = user.pk
        self.username = user.get_username()
        login = await database_sync_to_async(login_of)(user)
        self.agent_ids = list(login.agent_ids)
        await self._join(session_group(self.session_key))
        for agent_id in self.agent_ids:
            await self._join(agent_group(agent_id))
        await self._hear_escalations(login.escalations)
        await relay.ensure_started()
        await self.accept()
        if self.signed_out:  # logged out while this socket was opening
            await self.close(code=UNAUTHENTICATED)
            return
        self.accepted = True
        await self.send_json({"type": "hello", "agents": self.agent_ids})
        session_watch.add(self, self.session_key, self.user_pk)

    async def _join(self, group: str) -> None:
        if group in self.joined:
            return
        # Through this process's fan-out, not a layer channel of this socket's own (see live.Fanout).
        await fanout.join(group, self)
        self.joined.append(group)

    async def _leave(self, group: str) -> None:
        if group in self.joined:
            self.joined.remove(group)
            await fanout.leave(group, self)

    async def disconnect(self, code: int) -> None:
        self.accepted = False
        for run_id in list(self.present):
            await self._announce_presence(run_id, "leave")
        self.present, self.others = {}, {}
        session_watch.discard(self)
        for group in self.joined:
            await fanout.leave(group, self)
        self.joined = []

    async def _sign_out(self) -> None:
        self.signed_out = True
        session_watch.discard(self)
        if self.accepted:
            self.accepted = False
            await self.close(code=UNAUTHENTICATED)

    async def session_checked(self, login: Login | None) -> None:
        """The periodic re-check (``live.sessions``): what this socket's session logs in now."""
        if not self.accepted:
            return
        if login is None:  # deleted, expired, its user deactivated or their password changed
            await self._sign_out()
            return
        agent_ids = list(login.agent_ids)
        if agent_ids == self.agent_ids and login.escalations == self.escalations:
            return
        await self._see_agents(agent_ids)
        await self._hear_escalations(login.escalations)
        # The page refetches its partials: what it shows may have changed with the access.
        await self.send_json({"type": "agents", "agents": agent_ids})

    async def _hear_escalations(self, escalations: tuple[str, ...]) -> None:
        lost = set(self.escalations) - set(escalations)
        for name in lost:
            await self._leave(escalation_group(name))
        if lost:
            # The runs it watched through an escalation (of agents it does not see) may be none of
            # its user's now: forgotten, the page (told "agents") asks again and they are checked again.
            await self._forget(lambda agent_id: agent_id not in self.agent_ids)
        self.escalations = escalations
        self.escalation_groups = frozenset(map(escalation_group, escalations))
        for group in self.escalation_groups:
            await self._join(group)

    async def _see_agents(self, agent_ids: list[str]) -> None:
        gone = set(self.agent_ids) - set(agent_ids)
        self.agent_ids = agent_ids
        for agent_id in gone:
            await self._leave(agent_group(agent_id))
        await self._forget(gone.__contains__)
        for agent_id in agent_ids:
            await self._join(agent_group(agent_id))

    async def _forget(self, of: Callable[[str], bool]) -> None:
        """Stop watching, and showing the card of, the runs of the agents ``of`` picks."""
        for run_id, agent_id in list(self.runs.items()):
            if of(agent_id):
                del self.runs[run_id]
                await self._leave(run_group(run_id))
        for run_id, agent_id in list(self.present.items()):
            if of(agent_id):
                await self._announce_presence(run_id, "leave")
                del self.present[run_id]
                self.others.pop(run_id, None)
                await self._leave(presence_group(run_id))

    # -- from the page ---------------------------------------------------------------------------

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        if self.frames.over():
            await self.close(code=POLICY_VIOLATION)
            return
        # A frame that is not JSON (or not text, or too large or deep to read) gets the same error
        # answer as a wrong message, rather than ending the consumer.
        content: Any = None
        if text_data is not None and len(text_data) <= MAX_FRAME_CHARS:
            try:
                content = json.loads(text_data)
            except (ValueError, RecursionError):
                content = None
        await self.receive_json(content)

    async def _refuse(self, answer: dict[str, Any]) -> None:
        if self.bad_frames.over():
            await self.close(code=POLICY_VIOLATION)
            return
        await self.send_json({"type": "error", **answer})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and "presence" in content:
            await self._be_present(content["presence"])
            return
        run_id = content.get("subscribe_run") if isinstance(content, dict) else None
        if not isinstance(run_id, str) or not _usable_run_id(run_id):
            await self._refuse({"error": "expected {'subscribe_run': '<run id>'}"})
            return
        if run_id in self.runs:
            await self.send_json({"type": "subscribed", "run_id": run_id})
            return
        limit = int(getattr(settings, "LIVE_MAX_RUN_SUBSCRIPTIONS", DEFAULT_MAX_RUN_SUBSCRIPTIONS))
        if len(self.runs) >= limit:
            await self._refuse({"error": f"a page may watch at most {limit} runs", "run_id": run_id})
            return
        agent_id = await database_sync_to_async(self._agent_of)(run_id)
        if agent_id is not None:
            self.runs[run_id] = agent_id
            await self._join(run_group(run_id))
            await self.send_json({"type": "subscribed", "run_id": run_id})
        else:
            # Same answer for a foreign run and an unknown one: nothing about other agents leaks. It
            # counts as an unusable frame: asking for run ids at random is probing, not a page.
            await self._refuse({"error": "unknown run", "run_id": run_id})

    def _agent_of(self, run_id: str) -> str | None:
        """The agent of ``run_id`` when this user may see it, else ``None``."""
        run = queries.run_now(run_id)
        if run is not None:
            return run.agent_id if run.agent_id in self.agent_ids else self._escalated_agent_of(run)
        # A run that already ended: allowed if the audit trail shows it belongs to a visible agent.
        from approvals.models import AuditEntry

        entries = AuditEntry.objects.filter(run_id=run_id, agent_id__in=self.agent_ids)
        agent_id: str | None = entries.values_list("agent_id", flat=True).first()
        return agent_id

    # -- presence --------------------------------------------------------------------------------

    async def _be_present(self, run_id: Any) -> None:
        if not _usable_run_id(run_id):
            await self._refuse({"error": "expected {'presence': '<run id>'}"})
            return
        if run_id in self.present:
            await self._send_presence(run_id)
            return
        limit = int(getattr(settings, "LIVE_MAX_RUN_SUBSCRIPTIONS", DEFAULT_MAX_RUN_SUBSCRIPTIONS))
        if len(self.present) >= limit:
            await self._refuse({"error": f"a page may show at most {limit} runs", "run_id": run_id})
            return
        agent_id = await database_sync_to_async(self._waiting_agent_of)(run_id)
        if agent_id is None:
            # Same answer for a foreign run and an unknown one, as for subscribe_run.
            await self._refuse({"error": "unknown run", "run_id": run_id})
            return
        self.present[run_id] = agent_id
        self.others[run_id] = {}
        await self._join(presence_group(run_id))
        await self._announce_presence(run_id, "join")
        await self._send_presence(run_id)

    def _waiting_agent_of(self, run_id: str) -> str | None:
        """The agent of a waiting run this user may see (one indexed read, no snapshot)."""
        from approvals.models import RunRecord

        found: str | None = (
            RunRecord.objects.filter(run_id=run_id, agent_id__in=self.agent_ids)
            .values_list("agent_id", flat=True)
            .first()
        )
        if found is None and self.escalations:
            return self._escalated_agent_of(queries.run_now(run_id))
        return found

    def _escalated_agent_of(self, run: StoredRun | None) -> str | None:
        """The agent of ``run`` (``run_now``'s) when this user sees it only through an escalation (a
        waiting call of it escalated to one of their groups), else ``None``: the rule the run's page
        follows (``queries.waiting_seen``), so a socket watches no run its page would not show."""
        if not self.escalations or run is None or run.agent_id in self.agent_ids:
            return None  # (a user who hears of no escalation: most sockets, at no cost)
        # Their rights as they are now: the user the socket opened with keeps its groups of then.
        user = get_user_model()._default_manager.filter(pk=self.user_pk, is_active=True).first()
        found = queries.waiting_seen(Access.of(user), run) if user is not None else None
        return found[0].id if found is not None else None

    async def _announce_presence(self, run_id: str, op: str) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        group = presence_group(run_id)
        await layer.group_send(
            group,
            {
                "type": "presence.changed",
                "group": group,
                "op": op,
                "run_id": run_id,
                "member": self.member_key,
                "who": self.username,
            },
        )

    async def _send_presence(self, run_id: str) -> None:
        others = set(self.others.get(run_id, {}).values()) - {self.username}
        # Names as the pages show them: invisible characters as marks.
        users = sorted(reveal_invisible(name) for name in others)
        await self.send_json({"type": "presence", "run_id": run_id, "users": users})

    async def _presence_changed(self, message: dict[str, Any]) -> None:
        run_id, member = message.get("run_id"), message.get("member")
        if member == self.member_key or run_id not in self.present or not isinstance(member, str):
            return
        seen = self.others.setdefault(run_id, {})
        if message.get("op") == "leave":
            seen.pop(member, None)
        else:
            seen[member] = str(message.get("who") or "")
            if message.get("op") == "join":
                await self._announce_presence(run_id, "here")  # so the newcomer learns of this page
        await self._send_presence(run_id)

    # -- from the fan-out ------------------------------------------------------------------------

    def _hears(self, message: dict[str, Any]) -> bool:
        """A run event: of an agent this page sees, through that agent's group; through one of its
        escalation groups, of an agent it does not see (one it sees came through the agent's already)."""
        sees = message["event"].get("agent_id") in self.agent_ids
        return not sees if message.get("group") in self.escalation_groups else sees

    async def forward(self, message: dict[str, Any]) -> None:
        """A group's message, from ``live.fanout``: already encoded once for every page."""
        if message["type"] == "session.ended":
            await self._sign_out()
            return
        if not self.accepted:
            # Joined, not yet accepted (sending now would accept the socket behind connect's back).
            # Nothing is lost: the page refetches everything once its socket is open.
            return
        if message["type"] == "presence.changed":
            await self._presence_changed(message)
            return
        if message["type"] == "run.event":
            visible = self._hears(message)
        else:
            # The fan-out may still hold this page for a run it just stopped watching.
            visible = message["type"] == "run.chunks" and message.get("run_id") in self.runs
        if visible:
            # One ASGI message per frame and process, handed to every page as it is (see live.Fanout).
            frames = message.get("frames")
            if frames is None:
                texts = message["texts"] if "texts" in message else [message["text"]]
                frames = message["frames"] = [{"type": "websocket.send", "text": text} for text in texts]
            for frame in frames:
                await self.base_send(frame)
