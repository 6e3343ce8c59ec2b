"""Approval requests from any process: registered external agents ask, reviewers decide at the desk.

A request becomes a run of its external agent parked on one call (``ExternalAgent.request_approval``),
so the queue, cards, decisions (the one door), grants, deadlines, votes, live events, webhooks and
notifications are those of any run. This module keeps what the HTTP API needs around it:

- ``register`` / ``agent_token``: an external agent, its account and its tokens;
- ``create``: the request asked once per ``Idempotency-Key`` (a row reserved under a unique
  constraint before its run is parked, so two tries at once make one request);
- ``state_of``: where it stands, read from the audit log's row of its decision (written in the
  decision's own atomic step), so it reads the same while its run goes on and after it ended;
- ``wait``: the state once decided, or after ``seconds``, woken by the run's live events (a decision
  in any process reaches it through the channel layer) and never holding a thread while it waits;
- ``cancel`` (a decision through the one door: ``decisions.acancel``) and ``report`` (what running
  the approved call did, once, written on the request and in the audit log beside its decision).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents_runtime import (
    DecisionRefused,
    ExternalAgent,
    ExternalCall,
    InvalidExternalCall,
    InvalidResumeData,
    NotTheRequester,
    RunAlreadyDecided,
    RunNotFound,
    ToolCallNotSuspended,
)
from agents_runtime.store import NO_EFFECT_OUTCOMES, Deadline, DecisionAction, Outcome
from agents_runtime.untrusted import clean_text
from approvals import agents, live
from approvals.models import ApprovalRequest, AuditEntry, EndedRun, RunRecord, using_channel
from approvals.models import ExternalAgent as ExternalAgentRow
from approvals.policy import agent_group_name
from approvals.services import decisions
from approvals.services.tokens import NewToken, create_token

#: What a report of running the call keeps of its output.
MAX_OUTPUT_CHARS = 4000
#: The farthest a request's deadline may be.
MAX_DEADLINE = timedelta(days=366)
#: The longest a read waits for a decision.
MAX_WAIT_SECONDS = 60
#: A waiting read looks at the database again at least this often (a missed event costs no more).
RECHECK_SECONDS = 10.0
_DECISIONS = (DecisionAction.APPROVE, DecisionAction.DECLINE, DecisionAction.EXPIRE, DecisionAction.CANCEL)
_NOT_APPROVED = {DecisionAction.DECLINE.value: "declined", DecisionAction.CANCEL.value: "cancelled"}
#: Rows of a decision that did not stand: refused, lost, a vote, or overturned by a stopped run.
_NOT_STANDING = (*NO_EFFECT_OUTCOMES, Outcome.INTERRUPTED, Outcome.VOTE_RECORDED)


class RequestRefused(Exception):
    """A request, a cancel or a report that cannot be taken: nothing changed."""

    def __init__(
        self, status: int, message: str, code: str, issues: list[dict[str, str]] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.issues = status, message, code, issues


# -- external agents ---------------------------------------------------------------------------------


def register(agent_id: str, *, name: str = "", description: str = "", tools: Any = None) -> ExternalAgentRow:
    """Register (or update) the external agent ``agent_id`` and serve it: its account (who starts its
    runs), its ``agent:<id>`` group for designated reviewers. ``ValueError`` says what is wrong."""
    rules = tools if tools is not None else {}
    agents.tool_rules(rules)  # (ValueError naming the tool)
    row = ExternalAgentRow.objects.filter(agent_id=agent_id).first()
    if row is None:
        ExternalAgentRow(agent_id=agent_id).clean_fields(exclude=["user", "name", "description", "tools"])
        try:
            served = agents.get(agent_id)
        except agents.UnknownAgent:
            served = None
        if served is not None and not isinstance(served, ExternalAgent):
            raise ValueError(f"The runtime already has an agent {agent_id!r} of its own")
        with transaction.atomic():
            user = get_user_model().objects.create_user(f"external:{agent_id}", password=None)
            row = ExternalAgentRow.objects.create(
                agent_id=agent_id, name=name, description=description, tools=rules, user=user
            )
    else:
        row.name, row.description, row.tools = name or row.name, description or row.description, rules
        row.save(update_fields=["name", "description", "tools"])
    Group.objects.get_or_create(name=agent_group_name(agent_id))
    agents.serve_external(row)
    return row


def agent_token(agent_id: str, *, name: str, expires_at: datetime | None = None) -> NewToken:
    """A new token of the external agent: it may only create and read that agent's requests."""
    row = ExternalAgentRow.objects.select_related("user").get(agent_id=agent_id)
    return create_token(row.user, name=name, expires_at=expires_at, external_agent=row)


# -- asking ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """A request as the API validated it."""

    agent_id: str
    tool_name: str
    args: dict[str, Any]
    args_schema: dict[str, Any] | None = None
    title: str | None = None
    preview: dict[str, Any] | None = None
    thread_id: str | None = None
    resource_id: str | None = None
    deadline_at: datetime | None = None
    deadline_in: int | None = None
    deadline_default: str = "decline"
    deadline_given: bool = False

    def digest(self) -> str:
        """What tells a retry from another request under the same key: the body, canonically."""
        text = json.dumps(self.__dict__, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _deadline(asked: Asked, now: datetime, given: bool) -> Deadline | None:
    if not given:
        return None
    if (asked.deadline_at is None) == (asked.deadline_in is None):
        raise RequestRefused(
            422,
            "A deadline is at a moment or in some seconds",
            "invalid_request",
            [_issue("deadline", "give either at or inSeconds")],
        )
    after = timedelta(seconds=asked.deadline_in) if asked.deadline_in is not None else asked.deadline_at - now  # type: ignore[operator]
    if after > MAX_DEADLINE:
        raise RequestRefused(
            422,
            "The deadline is too far away",
            "invalid_request",
            [_issue("deadline", "at most a year away")],
        )
    if after <= timedelta(0):
        raise RequestRefused(
            422, "The deadline has passed already", "invalid_request", [_issue("deadline", "in the past")]
        )
    return Deadline(after, on_expiry="approve" if asked.deadline_default == "approve" else "decline")


def _issue(field: str, message: str) -> dict[str, str]:
    return {"field": field, "message": message}


def _external(agent_id: str) -> ExternalAgent:
    try:
        agent = agents.get(agent_id)
    except agents.UnknownAgent:
        agent = None
    if not isinstance(agent, ExternalAgent):
        raise RequestRefused(404, f"No external agent {agent_id!r}", "agent_not_found")
    return agent


def _reserve(
    asked: Asked, call: ExternalCall, key: str | None, deadline: Deadline | None
) -> tuple[ApprovalRequest, bool]:
    """The request's row, made now (True) or found under ``key`` (False): made first, so that of two
    tries at once one makes it and the other finds it (the unique constraint)."""
    digest = asked.digest()
    if key is not None:
        found = ApprovalRequest.objects.filter(agent_id=asked.agent_id, idempotency_key=key).first()
        if found is not None:
            return _same(found, digest), False
    now = timezone.now()
    try:
        with transaction.atomic():
            row = ApprovalRequest.objects.create(
                run_id=f"req_{uuid.uuid4().hex}",
                agent_id=asked.agent_id,
                tool_call_id="request",
                tool_name=call.tool_name,
                args=call.args,
                title=call.title or "",
                preview=call.preview,
                thread_id=call.thread_id,
                resource_id=call.resource_id,
                deadline_at=None if deadline is None else now + deadline.expires_after,
                deadline_default="" if deadline is None else deadline.on_expiry,
                created_at=now,
                asked_by=(call.started_by or "")[:150],
                idempotency_key=key,
                body_digest=digest,
            )
    except IntegrityError:
        found = ApprovalRequest.objects.filter(agent_id=asked.agent_id, idempotency_key=key).first()
        if key is None or found is None:
            raise
        return _same(found, digest), False
    return row, True


def _same(found: ApprovalRequest, digest: str) -> ApprovalRequest:
    if found.body_digest != digest:
        raise RequestRefused(
            422,
            "This Idempotency-Key was used for another request: use a new key for a new request",
            "idempotency_key_reused",
        )
    return found


async def create(
    asked: Asked, *, started_by: str, idempotency_key: str | None
) -> tuple[ApprovalRequest, bool]:
    """The request asked (True) or, under a key already used with the same body, as asked before (False)."""
    agent = await sync_to_async(_external)(asked.agent_id)
    deadline = _deadline(asked, timezone.now(), asked.deadline_given)
    call = ExternalCall(
        tool_name=asked.tool_name,
        args=asked.args,
        args_schema=asked.args_schema,
        title=asked.title,
        preview=asked.preview,
        thread_id=asked.thread_id,
        resource_id=asked.resource_id,
        deadline=deadline,
        started_by=started_by,
    )
    try:
        agent.check(call)
    except InvalidExternalCall as exc:
        issues = [_issue(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors]
        raise RequestRefused(422, str(exc), "invalid_request", issues) from None
    # Once begun, the row and its parked run are made together even if the asker goes away meanwhile
    # (a client that cancels, a connection dropped): a row without its run, or a run whose row was
    # taken back, would leave a retry under the same key waiting on nothing.
    asking = asyncio.ensure_future(_reserve_and_park(agent, asked, call, idempotency_key, deadline))
    _asking.add(asking)
    asking.add_done_callback(_asking.discard)
    return await asyncio.shield(asking)


#: Requests being made, kept from the garbage collector while their asker is gone.
_asking: set[asyncio.Future[tuple[ApprovalRequest, bool]]] = set()


async def _reserve_and_park(
    agent: ExternalAgent, asked: Asked, call: ExternalCall, key: str | None, deadline: Deadline | None
) -> tuple[ApprovalRequest, bool]:
    row, made = await sync_to_async(_reserve)(asked, call, key, deadline)
    if made:
        try:
            with using_channel("api"):
                await agent.request_approval(call, run_id=row.run_id)
        except Exception:
            await sync_to_async(_take_back)(row)
            raise
    return row, made


def _take_back(row: ApprovalRequest) -> None:
    """Forget a request whose run could not be parked (a retry under its key asks afresh); one whose
    run was stored before the failure (parked, or ended by a grant) stays."""
    stored = RunRecord.objects.filter(run_id=row.run_id).exists()
    if not stored and not EndedRun.objects.filter(run_id=row.run_id).exists():
        ApprovalRequest.objects.filter(pk=row.pk).delete()


# -- where a request stands ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestState:
    request: ApprovalRequest
    #: pending, approved, declined, expired or cancelled.
    status: str
    #: The arguments to run the tool with (approved), else None.
    approved_args: dict[str, Any] | None = None
    edited: bool = False
    reason: str | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None


def state_of(row: ApprovalRequest) -> RequestState:
    """Where the request stands: its decision's audit row (the one that stands), else pending."""
    entry = (
        AuditEntry.objects.for_call(row.run_id, row.tool_call_id)
        .filter(action__in=_DECISIONS)
        .exclude(outcome__in=_NOT_STANDING)
        .order_by("-id")
        .first()
    )
    if entry is None:
        return RequestState(row, "pending")
    reason, by, at = entry.reason or None, entry.username or None, entry.created_at
    shown = entry.args if isinstance(entry.args, dict) else row.args
    if entry.action == DecisionAction.APPROVE:
        edited = entry.edited_args is not None
        approved = entry.edited_args if edited else shown
        return RequestState(row, "approved", approved, edited, reason, by, at)
    if entry.action == DecisionAction.EXPIRE and entry.resume_data == {"approved": True}:
        return RequestState(row, "approved", shown, False, reason, by, at)
    status = _NOT_APPROVED.get(entry.action, "expired")
    return RequestState(row, status, None, False, reason, by, at)


class _Waiter:
    """Wakes a waiting read when an event of its run reaches this process (``live.fanout``)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.woken = asyncio.Event()

    async def forward(self, message: dict[str, Any]) -> None:
        if (message.get("event") or {}).get("run_id") == self.run_id:
            self.woken.set()


async def wait(row: ApprovalRequest, seconds: float) -> RequestState:
    """The request's state once decided, or after ``seconds`` (at most ``MAX_WAIT_SECONDS``)."""
    state = await sync_to_async(state_of)(row)
    if state.status != "pending" or seconds <= 0:
        return state
    loop = asyncio.get_running_loop()
    ends = loop.time() + min(seconds, MAX_WAIT_SECONDS)
    waiter, group = _Waiter(row.run_id), live.agent_group(row.agent_id)
    await live.relay.ensure_started()
    await live.fanout.join(group, waiter)
    try:
        # Read again once listening: a decision taken before the join is in the database.
        state = await sync_to_async(state_of)(row)
        while state.status == "pending" and (left := ends - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.woken.wait(), timeout=min(left, RECHECK_SECONDS))
            waiter.woken.clear()
            state = await sync_to_async(state_of)(row)
    finally:
        await live.fanout.leave(group, waiter)
    return state


# -- the requester's own steps ---------------------------------------------------------------------------


async def cancel(row: ApprovalRequest, *, actor: str, reason: str | None) -> RequestState:
    """Withdraw a pending request (a decision: it loses cleanly to one taken first, and wins over any
    taken after); 409 when it was decided."""
    agent = await sync_to_async(_external)(row.agent_id)
    try:
        await decisions.acancel(agent, row.run_id, row.tool_call_id, actor=actor, reason=reason)
    except InvalidResumeData as exc:
        raise RequestRefused(400, str(exc), "invalid_body", [_issue("reason", str(exc))]) from None
    except NotTheRequester as exc:
        raise RequestRefused(403, str(exc), exc.rule) from None
    except (RunAlreadyDecided, RunNotFound, ToolCallNotSuspended, DecisionRefused):
        state = await sync_to_async(state_of)(row)
        raise RequestRefused(
            409, f"The request was {state.status} already: nothing was cancelled", "already_decided"
        ) from None
    return await sync_to_async(state_of)(row)


def report(row: ApprovalRequest, *, ok: bool, output: str, actor: str) -> RequestState:
    """Record, once, what running the approved call did (on the request, and in the audit log beside
    its decision, so its run's record reads shown, decided, executed); 409 unless approved and not
    reported yet."""
    output = clean_text(output)[:MAX_OUTPUT_CHARS]
    if row.asked_by and actor != row.asked_by:
        raise RequestRefused(
            403, f"Only {row.asked_by}, who asked, reports what running the call did", "not_the_requester"
        )
    with transaction.atomic():
        state = state_of(row)
        if state.status != "approved":
            raise RequestRefused(
                409, f"The request is {state.status}: only an approved call is run", "not_approved"
            )
        now = timezone.now()
        taken = ApprovalRequest.objects.filter(pk=row.pk, result_reported_at__isnull=True).update(
            result_ok=ok, result_output=output, result_reported_at=now
        )
        if taken != 1:
            raise RequestRefused(
                409, "What running the call did was reported already", "result_already_reported"
            )
        AuditEntry.objects.create(
            created_at=now,
            username=clean_text(actor)[:150],
            agent_id=row.agent_id,
            run_id=row.run_id,
            thread_id=row.thread_id or "",
            resource_id=row.resource_id or "",
            tool_call_id=row.tool_call_id,
            tool_name=row.tool_name,
            args=state.approved_args,
            action=DecisionAction.EXECUTE,
            outcome=Outcome.RECORDED,
            outcome_detail=f"Ran {'without error' if ok else 'with an error'}: {output or '(no output)'}",
            channel="api",
        )
    row.refresh_from_db()
    return state_of(row)
