"""Bulk decisions: prepare a batch from a selection or an inbox's filters, start it, decide it.

Each call of a batch is decided on its own through the one door (``services.decide``, origin
``bulk``), so every rule a single click meets holds here too and the run store's exactly-once rule
with it: a call someone else decided meanwhile is reported as skipped, never decided twice. What the
reviewer posted is only a wish: every call is looked up again among the agent's waiting runs when
the batch is prepared, and the door checks the user's right to each call when the batch runs.

The preview says what the door will do: it asks the rules what approving each call would do now
(``Agent.would_decide``, the same rules the door runs, nothing recorded) and groups the calls by the
answer: decided, a vote of several, refused by a rule (separation of duties, a colleague's claim, a
risky call that needs "I checked this" on its own card...). No rule is repeated here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from agents_runtime import (
    Agent,
    AgentRun,
    AgentRunToolCall,
    DecisionRequest,
    Origin,
    RunNotFound,
    RunUnreadable,
    Would,
    escalated,
    shown,
)
from agents_runtime.store import DecisionAction, Outcome, bulk_result_line
from agents_runtime.untrusted import clean_text
from approvals import agents, live
from approvals.models import BULK_ACTIONS, DECIDING_BATCH, Batch, BatchItem, ParkedCallRecord
from approvals.policy import DECIDE_PERMISSION, Access, AgentAccess
from approvals.services.decisions import DecisionOutcome, decide

logger = logging.getLogger(__name__)

#: The most calls one batch takes ("all matching" stops there, and says so).
MAX_BATCH_CALLS = 500
_LIST_PAGE = 100

NOT_WAITING = "Not waiting for a decision on this agent (decided, gone, or not this agent's run)."
INPUT_CALL = "Waits for input: answer it on its own card (not bulk-decidable)."
SUB_AGENT = "A sub-agent's call: decide it through its supervisor's run."
NOT_ALLOWED = "You may no longer decide this agent's calls."
#: What a batch says of a call it could not decide for an error on the server (logged, never shown).
FAILED = "Could not be decided here (an error on the server, logged): decide it on its own card."
TOO_MANY = f"Over {MAX_BATCH_CALLS} calls: left out of this batch."


@dataclass(frozen=True)
class _Found:
    run_id: str
    tool_call_id: str
    call: AgentRunToolCall | None
    skip: str = ""


def _decidable(run: AgentRun, call: AgentRunToolCall) -> _Found:
    if run.parent_run_id:
        return _Found(run.run_id, call.tool_call_id, call, SUB_AGENT)
    if not call.requires_approval:
        return _Found(run.run_id, call.tool_call_id, call, INPUT_CALL)
    return _Found(run.run_id, call.tool_call_id, call)


def _fingerprint(agent: Agent, call: AgentRunToolCall) -> str:
    """What the preview shows of a call, as a decision is bound to it (arguments, preview, tool version)."""
    tool = agent.find_tool(call.tool_name, call.via_agent_id)
    return shown(call, tool.version if tool is not None else "")


def _selected(access: AgentAccess, selection: Iterable[tuple[str, str]]) -> Iterator[_Found]:
    """The posted calls, each looked up again among the agent's waiting runs; one that is not the
    user's to decide (seen only for escalations) is "not waiting" to them, as on its card."""
    agent = access.agent
    runs: dict[str, AgentRun | None] = {}
    for run_id, tool_call_id in selection:
        if run_id not in runs:
            try:
                runs[run_id] = agent.get_suspended_run_sync(run_id)
            except RunNotFound:
                runs[run_id] = None
        run = runs[run_id]
        call = next((c for c in run.tool_calls if c.tool_call_id == tool_call_id), None) if run else None
        if run is None or call is None or not access.decides(call):
            yield _Found(run_id, tool_call_id, None, NOT_WAITING)
        else:
            yield _decidable(run, call)


def _matching(access: AgentAccess, filters: dict[str, Any]) -> Iterator[_Found]:
    """Every waiting call the user may decide of the runs matching the inbox's filters (as the inbox
    lists them: seen only for escalations, those escalated to them), across all pages."""
    agent = access.agent
    query = {k: v for k, v in filters.items() if k not in {"page", "per_page"}}
    query["escalated_to"] = access.escalation_scope
    page = 0
    while True:
        result = agent.list_suspended_runs_sync(**query, per_page=_LIST_PAGE, page=page)
        for run in result.runs:
            for call in run.tool_calls:
                if access.decides(call):
                    yield _decidable(run, call)
        page += 1
        if page * _LIST_PAGE >= result.total or not result.runs:
            return


def batch_prepare(
    access: AgentAccess,
    *,
    selection: Iterable[tuple[str, str]] = (),
    filters: dict[str, Any] | None = None,
    query: dict[str, str] | None = None,
) -> Batch:
    """A draft batch of ``access.agent``'s calls: those selected, or all matching ``filters``.

    ``query`` is the inbox's query string (kept to say which filters "all matching" meant).
    Calls that cannot be bulk-decided are kept as skipped items with the reason.
    """
    access.access.require(DECIDE_PERMISSION, to="decide on suspended runs")
    agent = access.agent
    found = _matching(access, filters) if filters is not None else _selected(access, selection)
    items: list[BatchItem] = []
    seen: set[tuple[str, str]] = set()
    decidable = 0
    for f in found:
        key = (f.run_id, f.tool_call_id)
        if key in seen:
            continue
        seen.add(key)
        skip = f.skip
        if not skip:
            decidable += 1
            if decidable > MAX_BATCH_CALLS:
                skip = TOO_MANY
        items.append(
            BatchItem(
                position=len(items),
                run_id=f.run_id,
                tool_call_id=f.tool_call_id,
                tool_name=f.call.tool_name if f.call else "",
                via_agent_id=(f.call.via_agent_id or "") if f.call else "",
                args=f.call.args if f.call else None,
                fingerprint=_fingerprint(agent, f.call) if f.call and not skip else "",
                preview=f.call.context.preview if f.call and f.call.context else None,
                state=BatchItem.State.SKIPPED if skip else BatchItem.State.PENDING,
                detail=skip,
            )
        )
    with transaction.atomic():
        batch = Batch.objects.create(
            user=access.user,
            username=access.access.username,
            agent_id=agent.id,
            filters=query or {},
            all_matching=filters is not None,
        )
        for item in items:
            item.batch = batch
        BatchItem.objects.bulk_create(items)
    return batch


def batch_start(access: Access, batch: Batch, *, action: str, reason: str = "") -> bool:
    """Start a draft batch (its preparer only); False when it was started already (a double click)."""
    access.require(DECIDE_PERMISSION, to="decide on suspended runs")
    if batch.user_id != access.user.pk:
        raise PermissionDenied("Only the reviewer who prepared this batch may start it.")
    if action not in BULK_ACTIONS:
        raise ValueError(f"A batch approves or declines, not {action!r}")
    started = Batch.objects.filter(pk=batch.pk, state=Batch.State.DRAFT).update(
        state=Batch.State.RUNNING,
        action=action,
        reason=clean_text(reason.strip()) if action == DecisionAction.DECLINE else "",
        started_at=timezone.now(),
    )
    return started == 1


def _access_for(batch: Batch) -> AgentAccess | None:
    """The batch's reviewer's right to its agent now (None: they may no longer decide it)."""
    if batch.user_id is None:
        return None
    user = get_user_model()._default_manager.filter(pk=batch.user_id, is_active=True).first()
    if user is None:
        return None
    access = Access.of(user)
    if not access.can_decide:
        return None
    try:
        return access.for_agent(batch.agent_id)
    except (PermissionDenied, agents.UnknownAgent):
        return None


def _skip_reason(outcome: DecisionOutcome) -> str:
    status, message = outcome.status, outcome.message
    if status == Outcome.LOST_RACE:
        return message or "Already decided elsewhere."
    if status == Outcome.NOT_FOUND:
        # (A run that no longer reads still waits: the door's words say so, not "gone".)
        return message if outcome.refusal == RunUnreadable.rule else NOT_WAITING
    if status == Outcome.UNCONFIRMED:
        return f"Needs a confirmation on its own card: {message}"
    return message or str(status)


def batch_run(batch_id: int) -> dict[str, int]:
    """Decide every waiting item of a started batch, one at a time (the background task's body).

    Safe to run twice: each item is taken by a conditional update before it is decided.
    """
    batch = Batch.objects.get(pk=batch_id)
    if batch.state != Batch.State.RUNNING:
        return batch_counts(batch)
    # Read while its calls still wait: once decided, a call is no group's to hear of.
    escalated_to = _escalated_to(batch)
    for item in batch.items.filter(state=BatchItem.State.PENDING):
        taken = BatchItem.objects.filter(pk=item.pk, state=BatchItem.State.PENDING).update(
            state=BatchItem.State.DECIDING
        )
        if taken != 1:
            continue
        # The reviewer's rights as they are now, for each call: a batch can run long (each call's
        # continuation may run in it), and one who lost the right decides nothing more.
        access = _access_for(batch)
        state: str = BatchItem.State.SKIPPED
        detail = NOT_ALLOWED
        if access is not None:
            try:
                state, detail = _decide_item(access, batch, item)
            except Exception:  # one call's failure must not strand the rest of the batch
                logger.exception(
                    "Batch %s: deciding %s on %s failed", batch.pk, item.tool_call_id, item.run_id
                )
                state, detail = BatchItem.State.SKIPPED, FAILED
        BatchItem.objects.filter(pk=item.pk).update(state=state, detail=detail, decided_at=timezone.now())
    Batch.objects.filter(pk=batch.pk).update(state=Batch.State.DONE, finished_at=timezone.now())
    batch.refresh_from_db()
    finished = {"type": "batch-finished", "agent_id": batch.agent_id, "run_id": "", "batch": batch.pk}
    live.announce({**finished, "escalated_to": escalated_to})
    return batch_counts(batch)


def _escalated_to(batch: Batch) -> tuple[str, ...]:
    """The groups the batch's waiting calls were escalated to (its items, then their calls): its end reaches
    their pages too (``live.deliver``), as its reviewer may be one who sees the agent for those only."""
    items = batch.items.filter(state=BatchItem.State.PENDING)
    wanted = set(items.values_list("run_id", "tool_call_id"))
    calls = ParkedCallRecord.objects.filter(
        run__run_id__in={run_id for run_id, _ in wanted}, escalated_to__isnull=False
    ).undecided()
    rows = calls.values_list("run__run_id", "tool_call_id", "escalated_to")
    return escalated(group for run_id, call_id, group in rows if (run_id, call_id) in wanted)


def _decide_item(access: AgentAccess, batch: Batch, item: BatchItem) -> tuple[str, str]:
    request = DecisionRequest(
        item.run_id,
        item.tool_call_id,
        DecisionAction(batch.action),
        origin=Origin.BULK,
        reason=batch.reason if batch.action == DecisionAction.DECLINE else None,
        seen=item.fingerprint or None,
    )
    token = DECIDING_BATCH.set(batch.pk)
    try:
        outcome = decide(access, request)
    finally:
        DECIDING_BATCH.reset(token)
    if outcome.took_effect:
        return BatchItem.State.DECIDED, bulk_result_line(batch.action, outcome.status)
    return BatchItem.State.SKIPPED, _skip_reason(outcome)


@dataclass(frozen=True)
class Prediction:
    """One draft item and what approving it would do now (the rules' answer)."""

    item: BatchItem
    would: Would


def batch_predictions(access: AgentAccess, batch: Batch) -> list[Prediction]:
    """What approving each pending item of a draft batch would do now, asked of the rules
    (``Agent.would_decide``) as the batch will decide it: in bulk, by this reviewer, confirming
    nothing."""
    agent, who = access.agent, access.access
    predictions = []
    for item in batch.items.filter(state=BatchItem.State.PENDING):
        request = DecisionRequest(
            item.run_id,
            item.tool_call_id,
            DecisionAction.APPROVE,
            actor=who.username,
            origin=Origin.BULK,
            principal=who,
        )
        predictions.append(Prediction(item, async_to_sync(agent.would_decide)(request)))
    return predictions


def batch_counts(batch: Batch) -> dict[str, int]:
    counts = {state.value: 0 for state in BatchItem.State}
    for row in batch.items.values_list("state", flat=True):
        counts[row] += 1
    counts["total"] = sum(counts[s.value] for s in BatchItem.State)
    return counts
