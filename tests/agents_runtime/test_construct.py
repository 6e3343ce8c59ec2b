"""``construct`` builds the runtime's frozen records for hot loops (listings) without their
``__init__``: the record must be the one ``__init__`` builds, as frozen, and a record missing a field
(one added to the class later and forgotten in a hot loop) must be refused, not half-built."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields, replace
from datetime import UTC, datetime

import pytest

from agents_runtime.store import AgentRun, AgentRunToolCall, CallKind, ParkedCall, construct

AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def _values(record: object) -> dict[str, object]:
    return {f.name: getattr(record, f.name) for f in fields(record)}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "record",
    [
        ParkedCall(tool_call_id="c1", tool_name="refund", kind=CallKind.APPROVAL, args={"amount": 120}),
        AgentRunToolCall(tool_call_id="c1", tool_name="refund", args=None, requires_approval=False),
        AgentRun(
            run_id="r1",
            thread_id="t1",
            resource_id=None,
            suspended_at=AT,
            tool_calls=[],
            created_at=AT,
            agent_id="support",
        ),
    ],
    ids=lambda record: type(record).__name__,
)
def test_a_constructed_record_is_the_one_init_builds_and_as_frozen(record: object) -> None:
    built = construct(type(record), **_values(record))

    assert built == record and repr(built) == repr(record)
    with pytest.raises(FrozenInstanceError):
        built.tool_call_id = "other"  # type: ignore[attr-defined]
    assert replace(built) == record  # dataclasses' own helpers work on it


def test_a_missing_or_unknown_field_is_refused() -> None:
    record = AgentRunToolCall(tool_call_id="c1", tool_name="refund", args=None, requires_approval=True)
    values = _values(record)
    del values["approved_by"]

    with pytest.raises(TypeError, match=r"missing \['approved_by'\]"):
        construct(AgentRunToolCall, **values)
    with pytest.raises(TypeError, match=r"unknown \['colour'\]"):
        construct(AgentRunToolCall, **_values(record), colour="red")
