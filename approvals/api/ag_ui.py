"""AG-UI (``POST /api/ag-ui/agents/<agent_id>``): every agent of the runtime, as an AG-UI agent.

An AG-UI run is a run of our runtime, its chunks translated to AG-UI events (the ``ag-ui-protocol``
package's types, its encoder's server-sent events): ``RUN_STARTED``, text messages, tool calls
(start, arguments, end, result), then ``RUN_FINISHED`` or ``RUN_ERROR``. The thread is the runtime's
thread (its memory); the run that starts a runtime run gives it its id, and the user's name is its
resource. The prompt is the text of the last message, which must be the user's: the runtime's
memory holds the conversation, so the history the client sends is not replayed.

A run that parks ends with the interrupt outcome, one interrupt per waiting call, as pydantic-ai's
AG-UI adapter words an approval (``int-<toolCallId>``, its ``responseSchema``: ``approved``,
``editedArgs``, ``reason``); a ``suspend()``-ed call's interrupt asks for the tool's resume schema.
The same calls wait in the desk's queue. Each interrupt's ``metadata.countersign`` says which run it
is, whether this user may decide it (the rules' answer now, ``Agent.would_decide``), where the
desk shows it and, for an approval, its ``fingerprint`` as shown (the v1 API's). A resume entry
whose ``metadata.countersign`` echoes it approves that call or nothing: a call changed since (its
arguments, preview or tool version) is refused (``countersign.decision_refused``,
``arguments_changed``) and the run ends with its interrupts as they are now, to look at again.

Resuming (``resume`` entries on the thread) is a decision on each call through the one door, as
this user, on the channel "api": approve (with edits), decline (``approved: false`` or
``cancelled``), or resume with data. Entries are checked first (pydantic-ai's payload model, the
tool's validators): one the run would refuse ends the AG-UI run with ``RUN_ERROR`` and changes
nothing. A decision that takes effect streams the continuation. One the desk refuses this person
(separation of duties, not a decider, a colleague's claim, a risky call to confirm) or records as
one vote of several is said in a ``CUSTOM`` event (``countersign.decision_refused`` /
``countersign.vote_recorded``) and the call waits for a reviewer: this stream stays open on the
run's live group, and the reviewer's decision at the desk streams its continuation here (after a
``countersign.decided`` event naming them). A stream that waits longer than
``API_STREAM_MAX_SECONDS`` ends with the interrupts again. An entry whose ``metadata`` is
``{"countersign": {"wait": true}}`` decides nothing and only waits: how a chat whose user may not
decide reconnects. A resume holds one of its user's open waits until its stream closes
(``approvals.services.waits``; past the limit, a 429 before anything is decided). One decision,
once: an answer to a call someone else decided first is told so (``countersign.already_decided``,
on the record as a lost race), then how the run went on.

A request without ``resume`` on a thread whose run waits starts nothing: it ends at once with the
interrupts the thread owes (a chat that reloaded learns what it waits for). Bad requests (no token,
an unknown agent, a body that is no ``RunAgentInput``) are the API's JSON errors, before any event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    EventType,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from django.urls import reverse
from pydantic import ValidationError
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolApproved

# pydantic-ai's mapping of deferred tools to AG-UI interrupts and back (the interrupt's id and
# response schema, the resume payload's validation), so a client of its adapter works here as is.
from pydantic_ai.ui.ag_ui._interrupt import (
    approval_to_interrupt,
    interrupt_id_to_tool_call_id,
    resume_entry_to_approval,
)

from agents_runtime import AgentRun, ArgumentsChanged, Chunk, DecisionRequest, Origin, RunNotFound
from agents_runtime.store import DEFAULT_DECLINE_REASON, DecisionAction, Outcome
from approvals import queries
from approvals.api import deciding, params, precheck
from approvals.api.auth import agent_access
from approvals.api.errors import ApiError, invalid_body, issue
from approvals.api.ratelimit import limit_decisions
from approvals.api.relay import OUTPUT_GRACE_SECONDS, POLL_SECONDS, RunFollower, continues_elsewhere, tapped
from approvals.api.serialize import SSE_HEADERS, fingerprint_of
from approvals.api.views import api_view
from approvals.policy import AgentAccess
from approvals.services import runs, waits
from approvals.services.decisions import DecisionOutcome, recorded_outcome

logger = logging.getLogger(__name__)

Events = AsyncIterator[BaseEvent]

#: The ``metadata`` key of what Countersign adds to an interrupt (``ag-ui`` is the protocol's own).
META = "countersign"
#: What a cancelled interrupt tells the model (pydantic-ai's words).
CANCELLED = "Cancelled by user."


# -- the request --------------------------------------------------------------------------------------


def _run_input(request: HttpRequest) -> RunAgentInput:
    body = params.json_body(request)
    try:
        run_input = RunAgentInput.model_validate(body)
    except ValidationError as exc:
        raise invalid_body(
            [issue(".".join(str(p) for p in e["loc"]) or "body", e["msg"]) for e in exc.errors()]
        ) from None
    issues = []
    for name, value in (("threadId", run_input.thread_id), ("runId", run_input.run_id)):
        problem = params.id_problem(value) or ("" if value else "Must not be empty")
        if not problem and name == "runId" and not params.RUN_ID.match(value):
            # It names the run it starts, whose pages and routes carry it as one URL path segment.
            problem = params.RUN_ID_RULE
        if problem:
            issues.append(issue(name, problem))
    if issues:
        raise invalid_body(issues)
    return run_input


def _prompt(run_input: RunAgentInput) -> str:
    """The text of the last message, which must be the user's."""
    last = run_input.messages[-1] if run_input.messages else None
    text = ""
    if last is not None and last.role == "user":
        content = last.content
        if isinstance(content, str):
            text = content
        else:
            text = "\n".join(part.text for part in content if part.type == "text")
    if not text.strip():
        raise invalid_body([issue("messages", "The last message must be the user's, with text")])
    return text


@api_view("POST")
async def agent_run(request: HttpRequest, agent_id: str) -> HttpResponseBase:
    """Run the agent (or resume its interrupts) as an AG-UI agent: server-sent AG-UI events."""
    access = await agent_access(request, agent_id)
    run_input = _run_input(request)
    waiting = await _waiting_run(access, run_input.thread_id)
    if run_input.resume:
        return await _resuming(request, access, run_input, waiting)
    if waiting is not None:
        return _sse(_owed(access, run_input, waiting))
    return _sse(await _start(access, run_input))


async def _resuming(
    request: HttpRequest, access: AgentAccess, run_input: RunAgentInput, waiting: AgentRun | None
) -> StreamingHttpResponse:
    """The resume's stream, which may wait for a reviewer (a ``wait`` entry, or a call the rules
    leave to someone else): it holds one of the user's open-wait slots until it is closed."""
    slot = await waits.take(access.access.username)
    try:
        for entry in run_input.resume or ():
            if not _waits(entry):  # (each a decision, counted as the other doors count theirs)
                await limit_decisions(request, access.user)
        events = await _resume(access, run_input, waiting)
    except BaseException:
        await slot.arelease()
        raise
    return _sse(events, slot)


def _sse(events: Events, slot: waits.Slot | None = None) -> StreamingHttpResponse:
    encoder = EventEncoder()

    async def body() -> AsyncIterator[bytes]:
        last = None
        try:
            async for event in events:
                last = event.type
                yield encoder.encode(event).encode()
        except Exception:
            # (A decision on record stays on record: the stream only says it broke.)
            logger.exception("An AG-UI stream broke")
            if last not in (EventType.RUN_FINISHED, EventType.RUN_ERROR):
                broke = RunErrorEvent(message="The stream broke on the server", code="internal_error")
                yield encoder.encode(broke).encode()

    content = body() if slot is None else slot.releasing(body())
    return StreamingHttpResponse(content, content_type=encoder.get_content_type(), headers=SSE_HEADERS)


async def _waiting_runs(access: AgentAccess, thread_id: str) -> list[AgentRun]:
    """The thread's runs of this agent that wait on calls this user may see, newest first."""
    listed = await access.agent.list_suspended_runs(thread_id=thread_id, escalated_to=access.escalation_scope)
    return [run for run in listed.runs if access.sees(run) and run.parent_run_id is None]


async def _waiting_run(access: AgentAccess, thread_id: str) -> AgentRun | None:
    """The thread's newest run of this agent that waits on calls this user may see."""
    return next(iter(await _waiting_runs(access, thread_id)), None)


# -- the translation ----------------------------------------------------------------------------------


@dataclass
class AguiEvents:
    """One AG-UI run's events from the runtime's chunks of one run (``run_id``), keeping the open
    text message, the arguments seen, and the interrupts of a run that parks."""

    access: AgentAccess
    run_input: RunAgentInput
    run_id: str
    #: The calls the client saw already (a continuation announces its parked calls again).
    announced: set[str] = field(default_factory=set)
    args: dict[str, Any] = field(default_factory=dict)
    message_id: str | None = None
    waiting: list[dict[str, Any]] = field(default_factory=list)
    #: The run parked: ``finish`` (async: it asks the rules about each call) ends the AG-UI run.
    parked: bool = False
    #: ``RUN_FINISHED`` or ``RUN_ERROR`` went out: nothing more may.
    ended: bool = False
    #: The chat was told who decided the calls it waited on.
    told: bool = False

    def started(self) -> RunStartedEvent:
        return RunStartedEvent(
            thread_id=self.run_input.thread_id,
            run_id=self.run_input.run_id,
            protocol_version=PROTOCOL_VERSION,
        )

    def _close_text(self) -> Iterator[BaseEvent]:
        if self.message_id is not None:
            yield TextMessageEndEvent(message_id=self.message_id)
            self.message_id = None

    def events(self, chunk: Chunk) -> Iterator[BaseEvent]:
        if self.ended or self.parked:
            return
        p = chunk.payload
        if chunk.type == "text-delta":
            text = str(p.get("text") or "")
            if text:
                if self.message_id is None:
                    self.message_id = str(uuid.uuid4())
                    yield TextMessageStartEvent(message_id=self.message_id, role="assistant")
                yield TextMessageContentEvent(message_id=self.message_id, delta=text)
        elif chunk.type == "tool-call":
            yield from self._tool_call(p)
        elif chunk.type == "tool-result":
            yield from self._close_text()
            yield ToolCallResultEvent(
                message_id=str(uuid.uuid4()),
                tool_call_id=str(p["tool_call_id"]),
                content=_text(p.get("result")),
                role="tool",
            )
        elif chunk.type in ("tool-call-approval", "tool-call-suspended"):
            yield from self._close_text()
            self.waiting.append({**p, "requires_approval": chunk.type == "tool-call-approval"})
        elif chunk.type == "error" and chunk.run_id == self.run_id:
            yield from self.error(str(p.get("error") or "The run failed"), "run_failed")
        elif chunk.type == "finish" and chunk.run_id == self.run_id:
            yield from self._close_text()
            status = p.get("status")
            if status == "success":
                yield from self.success(p.get("text"))
            elif status == "suspended":
                self.parked = True
            else:
                yield from self.error(str(p.get("error") or "The run failed"), "run_failed")

    def _tool_call(self, p: dict[str, Any]) -> Iterator[BaseEvent]:
        call_id = str(p["tool_call_id"])
        self.args[call_id] = p.get("args") or {}
        if call_id in self.announced:
            return
        self.announced.add(call_id)
        parent = self.message_id
        yield from self._close_text()
        yield ToolCallStartEvent(
            tool_call_id=call_id, tool_call_name=str(p["tool_name"]), parent_message_id=parent
        )
        yield ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(self.args[call_id], default=str))
        yield ToolCallEndEvent(tool_call_id=call_id)

    def success(self, result: Any = None) -> Iterator[BaseEvent]:
        yield from self._close_text()
        self.ended = True
        yield RunFinishedEvent(
            thread_id=self.run_input.thread_id,
            run_id=self.run_input.run_id,
            result=result,
            outcome=RunFinishedSuccessOutcome(),
        )

    def error(self, message: str, code: str) -> Iterator[BaseEvent]:
        yield from self._close_text()
        self.ended = True
        yield RunErrorEvent(message=message, code=code)

    def custom(self, name: str, **value: Any) -> CustomEvent:
        return CustomEvent(name=f"{META}.{name}", value={"runId": self.run_id, **value})

    async def finish(self) -> BaseEvent:
        """The parked run's ``RUN_FINISHED``: an interrupt for each call it waits on, an approval's
        with the fingerprint of the call as shown (``countersign.fingerprint``, as the v1 API's)."""
        self.ended = True
        try:
            run: AgentRun | None = await self.access.agent.get_suspended_run(self.run_id)
        except RunNotFound:
            if not self.waiting:
                raise
            run = None  # (decided since it parked: its interrupts as its chunks said them, unbound)
        if not self.waiting and run is not None:
            # (Its parking chunks did not come this way: the run says what it waits on.)
            self.waiting = _waiting_of(run)
        seen = _fingerprints(self.access, run)
        interrupts = [
            await self._interrupt(call, seen.get(str(call["tool_call_id"]))) for call in self.waiting
        ]
        return RunFinishedEvent(
            thread_id=self.run_input.thread_id,
            run_id=self.run_input.run_id,
            outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
        )

    async def _interrupt(self, call: dict[str, Any], fingerprint: str | None) -> Interrupt:
        call_id, tool = str(call["tool_call_id"]), str(call["tool_name"])
        meta: dict[str, Any] = {
            "runId": self.run_id,
            "toolName": tool,
            "kind": "approval" if call["requires_approval"] else "suspend",
            "dashboard": reverse("approvals:run", args=[self.run_id]),
            **await self._may_decide(call_id, call["requires_approval"]),
            **({"fingerprint": fingerprint} if fingerprint else {}),
        }
        if call["requires_approval"]:
            args = call.get("args") or {}
            part = ToolCallPart(tool_name=tool, args=args, tool_call_id=call_id)
            interrupt = approval_to_interrupt(part, {call_id: {META: meta}})
            schema = dict(interrupt.response_schema or {})
            # Beyond pydantic-ai's payload: what a reviewer confirms at the desk (Mastra's routes
            # carry neither; the v1 API's ``confirm`` and ``confirmRerun``).
            schema["properties"] = {
                **schema.get("properties", {}),
                "confirmRisky": {"type": "boolean"},
                "confirmRerun": {"type": "boolean"},
            }
            return interrupt.model_copy(update={"response_schema": schema})
        suspended = call.get("suspend_payload")
        meta["suspendPayload"] = suspended
        meta["args"] = self.args.get(call_id)
        question = (
            suspended.get("question") or suspended.get("message") if isinstance(suspended, dict) else None
        )
        return Interrupt(
            id=f"int-{call_id}",
            reason="input_required",
            tool_call_id=call_id,
            message=str(question) if question else f"{tool} asks for input",
            response_schema=dict(call.get("resume_schema") or {"type": "object"}),
            metadata={META: meta},
        )

    async def _may_decide(self, call_id: str, approval: bool) -> dict[str, Any]:
        """The rules' answer now to "may this user decide the call?" (a hint: they run again when
        the answer comes). A suspended call is asked as a decline: its data is not known yet."""
        who = self.access.access
        request = DecisionRequest(
            self.run_id,
            call_id,
            DecisionAction.APPROVE if approval else DecisionAction.DECLINE,
            actor=who.username,
            origin=Origin.API,
            principal=who,
        )
        if not who.can_decide:
            return {"mayDecide": False, "waitsFor": "reviewer", "refusal": "not_a_decider"}
        would = await self.access.agent.would_decide(request)
        if would.effect in ("decides", "vote"):
            return {
                "mayDecide": True,
                **({"approvalsRequired": would.required} if would.effect == "vote" else {}),
            }
        return {"mayDecide": False, "waitsFor": "reviewer", "refusal": would.rule or would.effect}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _fingerprints(access: AgentAccess, run: AgentRun | None) -> dict[str, str]:
    """The fingerprints of the run's approvals as shown (what a resume's metadata may echo)."""
    calls = run.tool_calls if run is not None else []
    return {c.tool_call_id: seen for c in calls if (seen := fingerprint_of(access.agent, c))}


def _waiting_of(run: AgentRun) -> list[dict[str, Any]]:
    """A waiting run's calls as its parking chunks say them."""
    return [
        {
            "tool_call_id": c.tool_call_id,
            "tool_name": c.tool_name,
            "args": c.args,
            "requires_approval": c.requires_approval,
            "suspend_payload": c.suspend_payload,
            "resume_schema": c.resume_schema,
        }
        for c in run.tool_calls
    ]


async def _translated(events: AguiEvents, chunks: AsyncIterator[Chunk]) -> Events:
    async for chunk in chunks:
        for event in events.events(chunk):
            yield event
        if events.parked:
            yield await events.finish()
        if events.ended:
            return


# -- starting, and what a thread owes ----------------------------------------------------------------


async def _start(access: AgentAccess, run_input: RunAgentInput) -> Events:
    prompt = _prompt(run_input)
    try:
        stream = await runs.run_stream(
            access,
            prompt=prompt,
            thread_id=run_input.thread_id,
            resource_id=access.access.username,
            run_id=run_input.run_id,
        )
    except PermissionDenied as exc:
        raise ApiError(403, str(exc), "permission_denied") from None
    except runs.RunIdInUse as exc:
        raise ApiError(400, str(exc), "run_id_in_use", issues=[issue("runId", str(exc))]) from None
    events = AguiEvents(access, run_input, stream.run_id)

    async def started() -> Events:
        yield events.started()
        async for event in _translated(events, aiter(stream)):
            yield event
        await stream.result()
        async for event in _closing(events, []):
            yield event

    return started()


async def _owed(access: AgentAccess, run_input: RunAgentInput, run: AgentRun) -> Events:
    events = AguiEvents(access, run_input, run.run_id, waiting=_waiting_of(run))
    yield events.started()
    yield await events.finish()


# -- resuming: decisions through the one door --------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One resume entry as a decision on a call (``action`` None: the entry only waits for one)."""

    entry: ResumeEntry
    tool_call_id: str
    action: params.Action | None = None
    body: params.Decision | None = None


def _waits(entry: ResumeEntry) -> bool:
    """An entry that decides nothing and waits for the desk (``metadata.countersign.wait``): how a
    chat whose user may not decide the call (or that hung up) follows it until a reviewer does."""
    meta = entry.metadata.get(META) if isinstance(entry.metadata, dict) else None
    return isinstance(meta, dict) and meta.get("wait") is True


def _seen(entry: ResumeEntry) -> str | None:
    """The call's fingerprint as the chat was shown it, echoed from its interrupt's metadata
    (``countersign.fingerprint``); None: the answer is not bound to it (as Mastra's are not)."""
    meta = entry.metadata.get(META) if isinstance(entry.metadata, dict) else None
    seen = meta.get("fingerprint") if isinstance(meta, dict) else None
    if seen is not None and not (isinstance(seen, str) and 0 < len(seen) <= params.MAX_FINGERPRINT_LENGTH):
        detail = f"metadata.countersign.fingerprint: 1 to {params.MAX_FINGERPRINT_LENGTH} characters"
        raise ApiError(400, "Invalid resume payload", "invalid_resume", detail=detail)
    return seen


def _call_id(entry: ResumeEntry) -> str:
    try:
        return interrupt_id_to_tool_call_id(entry.interrupt_id)
    except UserError:
        return entry.interrupt_id


def _answer(access: AgentAccess, run: AgentRun, entry: ResumeEntry) -> Answer | None:
    """The decision ``entry`` asks for on its waiting call (None: the run does not wait on it);
    ``ApiError`` (400) for one the run would refuse."""
    call_id = _call_id(entry)
    call = next((c for c in run.tool_calls if c.tool_call_id == call_id), None)
    if call is None:
        return None
    if _waits(entry):
        return Answer(entry, call_id)
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    risky, rerun = payload.get("confirmRisky") is True, payload.get("confirmRerun") is True
    action: params.Action
    if entry.status == "cancelled":
        action, body = "decline", params.Decision(run.run_id, call_id, reason=CANCELLED)
    elif call.requires_approval:
        try:
            verdict = resume_entry_to_approval(entry)
        except UserError as exc:
            raise ApiError(400, "Invalid resume payload", "invalid_resume", detail=str(exc)) from None
        if isinstance(verdict, ToolApproved):
            edited = verdict.override_args if isinstance(verdict.override_args, dict) else None
            action = "approve"
            body = params.Decision(
                run.run_id,
                call_id,
                edited_args=edited,
                confirm_rerun=rerun,
                confirm_risky=risky,
                seen=_seen(entry),
            )
        else:
            reason = payload.get("reason") if isinstance(payload.get("reason"), str) else ""
            action = "decline"
            body = params.Decision(run.run_id, call_id, reason=reason or DEFAULT_DECLINE_REASON)
    else:
        action = "resume"
        body = params.Decision(run.run_id, call_id, resume_data=entry.payload, confirm_rerun=rerun)
    precheck.check(access.agent, call, action, body)
    return Answer(entry, call_id, action, body)


def _late(run_id: str, entry: ResumeEntry) -> Answer:
    """An answer to a call that no longer waits, as it was meant: the door says who decided it
    first (and keeps this attempt on the record)."""
    call_id = _call_id(entry)
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    if _waits(entry):
        return Answer(entry, call_id)
    if entry.status == "cancelled" or payload.get("approved") is False:
        return Answer(entry, call_id, "decline", params.Decision(run_id, call_id, reason=CANCELLED))
    if payload.get("approved") is True:
        return Answer(entry, call_id, "approve", params.Decision(run_id, call_id))
    return Answer(entry, call_id, "resume", params.Decision(run_id, call_id, resume_data=entry.payload))


async def _resume(access: AgentAccess, run_input: RunAgentInput, run: AgentRun | None) -> Events:
    entries = run_input.resume or []
    events = AguiEvents(access, run_input, run.run_id if run is not None else "")
    try:
        answers = [_answer(access, run, entry) for entry in entries] if run is not None else [None]
    except ApiError as error:
        return _refused_input(events, error)
    if run is not None and all(answer is not None for answer in answers):
        return _decided(_of_waiting(events, run), [a for a in answers if a is not None])
    if len(entries) > 1:
        # (Some for another run than the thread's newest waiting one: each run is resumed on its own.)
        return _refused_input(events, ApiError(400, "Invalid resume payload", "invalid_resume", detail=MIXED))
    # An answer to a call of an older run of the thread that still waits: decided there as asked.
    (entry,) = entries
    older = await _run_holding(access, run_input.thread_id, _call_id(entry))
    if older is not None:
        try:
            answer = _answer(access, older, entry)
        except ApiError as error:
            return _refused_input(events, error)
        assert answer is not None  # (the run holds the call)
        return _decided(_of_waiting(AguiEvents(access, run_input, older.run_id), older), [answer])
    # A call the thread no longer waits on: to the run a decision on it was recorded on.
    decided = await sync_to_async(queries.decided_run_id)(
        access.agent.id, run_input.thread_id, _call_id(entry)
    )
    if decided is None:
        return _refused_input(events, ApiError(409, _not_waiting(entry), "not_waiting"))
    return _decided(AguiEvents(access, run_input, decided), [_late(decided, entry)])


#: Why a resume whose entries are not all for one waiting run is refused (nothing decided).
MIXED = (
    "Its entries answer interrupts of more than one run, or of a run that is not the thread's newest "
    "waiting one: resume one run at a time (one entry at a time for an older run)"
)


def _of_waiting(events: AguiEvents, run: AgentRun) -> AguiEvents:
    """``events`` of a waiting run whose calls the client saw already (their arguments included)."""
    events.announced = {c.tool_call_id for c in run.tool_calls}
    events.args = {c.tool_call_id: c.args for c in run.tool_calls if c.args is not None}
    return events


async def _run_holding(access: AgentAccess, thread_id: str, call_id: str) -> AgentRun | None:
    """The thread's waiting run (of those the user may see) that waits on the call ``call_id``."""
    runs = await _waiting_runs(access, thread_id)
    return next((run for run in runs if any(c.tool_call_id == call_id for c in run.tool_calls)), None)


def _not_waiting(entry: ResumeEntry) -> str:
    return f"Interrupt {entry.interrupt_id!r} waits on nothing on this thread (it was decided, or never was)"


async def _refused_input(events: AguiEvents, error: ApiError) -> Events:
    """A resume the run would refuse: said as the protocol says it (``RUN_ERROR``), nothing decided."""
    yield events.started()
    issues = "; ".join(f"{i['field']}: {i['message']}" for i in error.issues or [])
    said = " ".join(str(part) for part in (error.error, error.extra.get("detail"), issues) if part)
    for event in events.error(said, error.code):
        yield event


async def _decided(events: AguiEvents, answers: list[Answer]) -> Events:
    yield events.started()
    follower = RunFollower(events.run_id)
    # Joined before deciding: a reviewer who decides once this person is refused is heard.
    await follower.__aenter__()
    try:
        left: list[str] = []
        for answer in answers:
            async for event in _answered(events, answer, follower, left):
                yield event
            if events.ended:
                return
        if left:
            async for event in _reviewer(events, follower, left):
                yield event
        async for event in _closing(events, [a.tool_call_id for a in answers]):
            yield event
    finally:
        await follower.leave()


async def _answered(events: AguiEvents, answer: Answer, follower: RunFollower, left: list[str]) -> Events:
    """One answer through the door, and what came of it; a call that is now someone else's to
    decide goes on ``left``."""
    where = {"interruptId": answer.entry.interrupt_id, "toolCallId": answer.tool_call_id}
    if answer.action is None or answer.body is None:
        if await _still_going(events, [answer.tool_call_id]):
            left.append(answer.tool_call_id)
            yield events.custom("waiting", **where, waitsFor="reviewer")
        return
    decide = deciding.decision_call(
        events.access, answer.action, events.run_id, answer.tool_call_id, answer.body, origin=Origin.API
    )
    outcome, chunks = await _decision(decide, follower)
    async for event in _translated(events, chunks):
        yield event
    if outcome is None or events.ended:
        return
    said = _said(events, answer, outcome)
    for event in said:
        if event.type == EventType.CUSTOM and not _look_again(event):
            left.append(answer.tool_call_id)
            # (A lost race names who decided: no need to say it again.)
            events.told = events.told or getattr(event, "name", "").endswith("already_decided")
        yield event


def _look_again(event: BaseEvent) -> bool:
    """A refusal the chat answers itself, looking at the call as it is now (not left to a reviewer)."""
    value = getattr(event, "value", None)
    return isinstance(value, dict) and value.get("code") == ArgumentsChanged.rule


def _said(events: AguiEvents, answer: Answer, outcome: DecisionOutcome | PermissionDenied) -> list[BaseEvent]:
    """What the chat is told of a decision that did not continue the run: a ``CUSTOM`` event when
    the call is (or was) someone else's to decide, ``RUN_ERROR`` when the door refused the answer
    itself, nothing when it was taken and the run waits on its other calls (``_closing``)."""
    where = {"interruptId": answer.entry.interrupt_id, "toolCallId": answer.tool_call_id}
    if isinstance(outcome, PermissionDenied):
        message = f"{outcome} The call waits for a reviewer at the desk."
        return [
            events.custom(
                "decision_refused", **where, code="not_a_decider", message=message, waitsFor="reviewer"
            )
        ]
    status, message = outcome.status, outcome.message
    if status == Outcome.VOTE_RECORDED:
        tally = outcome.approvals
        voters = list(tally.approved_by) if tally else []
        required = tally.required if tally else None
        vote = events.custom("vote_recorded", **where, message=message, approvedBy=voters, required=required)
        return [vote]
    if outcome.refusal == ArgumentsChanged.rule:
        # The chat showed an older call: it looks again at the interrupt ``_closing`` gives it.
        return [events.custom("decision_refused", **where, code=outcome.refusal, message=message)]
    if status in (Outcome.REFUSED, Outcome.UNCONFIRMED):
        code = outcome.refusal or str(status)
        return [events.custom("decision_refused", **where, code=code, message=message, waitsFor="reviewer")]
    if status == Outcome.LOST_RACE:
        # One decision, once: the winner's continuation (if it still runs) comes here too.
        at = outcome.winner_at.isoformat() if outcome.winner_at else None
        return [
            events.custom("already_decided", **where, message=message, decidedBy=outcome.winner, decidedAt=at)
        ]
    if status in (Outcome.NOT_FOUND, Outcome.INVALID):
        return list(events.error(message, "not_waiting" if status == Outcome.NOT_FOUND else "invalid_resume"))
    return []


async def _decision(
    decide: Callable[[], Awaitable[DecisionOutcome]], follower: RunFollower
) -> tuple[DecisionOutcome | PermissionDenied | None, AsyncIterator[Chunk]]:
    """The decision, and the chunks of the continuation it started. The outcome is ``None`` while the
    continuation runs in this request (its chunks say how the run went), else the decision's (or
    the door's refusal of a user who decides nothing)."""
    if continues_elsewhere():
        try:
            outcome = await decide()
        except PermissionDenied as exc:
            return exc, _none()
        return outcome, follower.chunks() if outcome.status == Outcome.CONTINUING else _none()
    task, first, rest = await tapped(decide)
    if first is None:
        try:
            return task.result(), _none()
        except PermissionDenied as exc:
            return exc, _none()

    async def chunks() -> AsyncIterator[Chunk]:
        yield first
        async for item in rest:
            yield item

    return None, chunks()


async def _none() -> AsyncIterator[Chunk]:
    return
    yield


async def _reviewer(events: AguiEvents, follower: RunFollower, left: list[str]) -> Events:
    """Once someone else decides the calls ``left`` to them: who did (``countersign.decided``), then
    the continuation to its end. Nothing after ``API_STREAM_MAX_SECONDS``; nothing more once the
    run waits on other calls, or once it ended and its output is in (``OUTPUT_GRACE_SECONDS``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + float(getattr(settings, "API_STREAM_MAX_SECONDS", 600))
    going = await _still_going(events, left)
    if not going:  # (over already: what it sent since this stream joined is in, or nearly)
        deadline = min(deadline, loop.time() + POLL_SECONDS)
    while loop.time() < deadline and not events.ended:
        try:
            chunk = await asyncio.wait_for(follower.queue.get(), min(POLL_SECONDS, deadline - loop.time()))
        except TimeoutError:
            if not going or deadline <= loop.time() + OUTPUT_GRACE_SECONDS:
                continue
            state = await _run_state(events, left)
            if state == "parked":
                return  # (it waits on other calls now: ``_closing`` says which)
            if state == "ended":
                # Seen going, so its output to its ``finish`` comes this way; without it, ``_closing`` ends.
                deadline = loop.time() + OUTPUT_GRACE_SECONDS
            continue
        if not events.told:
            decided = await _who_decided(events, left)
            if decided is not None:
                yield decided
        for event in events.events(chunk):
            yield event
        if events.parked:
            yield await events.finish()


async def _still_going(events: AguiEvents, left: list[str]) -> bool:
    """Whether the run still waits on one of ``left``, or a continuation works on it."""
    return await _run_state(events, left) == "going"


async def _run_state(events: AguiEvents, left: list[str]) -> Literal["going", "parked", "ended"]:
    """Where the run is: "going" while it waits on one of ``left`` or a continuation works on it,
    "parked" when it waits on other calls only, "ended" when it waits no more (one read)."""
    run = await sync_to_async(queries.run_now)(events.run_id)
    if run is None or run.agent_id != events.access.agent.id:
        return "ended"
    if run.status == "running":
        return "going"
    return "going" if any(c.tool_call_id in left for c in run.undecided) else "parked"


async def _recorded(events: AguiEvents, call_ids: list[str]) -> DecisionOutcome | None:
    """The decision that took effect on one of the calls, as the audit log has it."""
    visible = list(events.access.access.agent_ids)
    for call_id in call_ids:
        outcome = await sync_to_async(recorded_outcome)(events.run_id, call_id, visible=visible, notice="")
        if outcome is not None:
            return outcome
    return None


async def _who_decided(events: AguiEvents, left: list[str]) -> BaseEvent | None:
    outcome = await _recorded(events, left)
    if outcome is None:
        return None
    events.told = True
    return events.custom(
        "decided",
        interruptId=f"int-{outcome.tool_call_id}",
        toolCallId=outcome.tool_call_id,
        action=str(outcome.action),
        decidedBy=outcome.decided_by,
    )


async def _closing(events: AguiEvents, answered: list[str]) -> Events:
    """The end of an AG-UI run whose chunks said no end: the run's interrupts if it waits, else its
    answer as the audit log has it."""
    if events.ended:
        return
    try:
        run = await events.access.agent.get_suspended_run(events.run_id)
    except RunNotFound:
        if not events.told and (decided := await _who_decided(events, answered)) is not None:
            yield decided
        outcome = await _recorded(events, answered)
        for event in events.success(outcome.text if outcome is not None else None):
            yield event
        return
    events.waiting = _waiting_of(run)
    yield await events.finish()
