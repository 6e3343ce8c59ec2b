"""docs/agents.md's example runs as the guide says: through the runtime API and through ``run_agent``.

The guide shows ``examples/first_agent/agent.py`` verbatim; the first test keeps them equal.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents_runtime import RunResult, RunStream
from examples.first_agent import ledger, payables
from tests.support import server

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "agents.md"
AGENT_FILE = ROOT / "examples" / "first_agent" / "agent.py"


def _guide_block(source: str) -> str:
    """The python block that follows the guide's ``<!-- examples/first_agent/agent.py -->`` marker."""
    match = re.search(r"<!-- examples/first_agent/agent\.py -->\s*```python\n(.*?)```", source, re.DOTALL)
    assert match, f"{GUIDE} has no python block under the examples/first_agent/agent.py marker"
    return match.group(1)


def test_the_guide_shows_the_example_file_as_it_is() -> None:
    assert _guide_block(GUIDE.read_text()) == AGENT_FILE.read_text()


async def _settled(stream: RunStream) -> RunResult:
    return await stream.result()


async def test_a_large_invoice_asks_for_the_cost_centre_then_waits_for_approval() -> None:
    asked = await payables.generate("Pay INV-7 for $250", thread_id="guide-large")
    assert asked.status == "suspended"
    [question] = asked.tool_calls
    assert (question.tool_name, question.requires_approval) == ("ask_cost_centre", False)
    assert question.suspend_payload == {"question": "Which cost centre pays INV-7?"}
    assert question.resume_schema is not None and "cost_centre" in question.resume_schema["properties"]

    waiting = await _settled(
        await payables.resume_stream({"cost_centre": "R&D"}, run_id=asked.run_id, actor="guide")
    )
    assert waiting.status == "suspended"
    [payment] = waiting.tool_calls
    assert (payment.tool_name, payment.args) == (
        "pay_invoice",
        {"invoice_id": "INV-7", "amount_cents": 25_000},
    )
    assert payment.requires_approval
    assert payment.tool_call_id not in ledger.payments

    done = await _settled(
        await payables.approve_tool_call(
            run_id=asked.run_id, tool_call_id=payment.tool_call_id, actor="guide"
        )
    )
    assert done.status == "success"
    assert ledger.payments[payment.tool_call_id] == ("INV-7", 25_000)


async def test_a_small_invoice_is_paid_without_an_approval() -> None:
    asked = await payables.generate("Pay INV-8 for $40", thread_id="guide-small")
    done = await _settled(
        await payables.resume_stream({"cost_centre": "Ops"}, run_id=asked.run_id, actor="guide")
    )
    assert done.status == "success"
    assert ("INV-8", 4_000) in ledger.payments.values()


async def test_a_declined_payment_never_reaches_the_ledger() -> None:
    asked = await payables.generate("Pay INV-9 for $900", thread_id="guide-declined")
    waiting = await _settled(await payables.resume_stream({"cost_centre": "R&D"}, run_id=asked.run_id))
    [payment] = waiting.tool_calls
    await _settled(
        await payables.decline_tool_call(
            run_id=asked.run_id, tool_call_id=payment.tool_call_id, reason="Not our invoice"
        )
    )
    assert payment.tool_call_id not in ledger.payments
    assert ("INV-9", 90_000) not in ledger.payments.values()


def test_paying_twice_with_one_tool_call_id_pays_once() -> None:
    first = ledger.pay("INV-10", 500, idempotency_key="call_guide_twice")
    again = ledger.pay("INV-10", 500, idempotency_key="call_guide_twice")
    assert first == again
    assert list(ledger.payments).count("call_guide_twice") == 1


@pytest.mark.slow
@pytest.mark.own_sqlite
def test_the_dashboard_serves_it_when_agents_runtime_names_it(tmp_path: Path) -> None:
    env = server.env_for(f"sqlite:///{tmp_path / 'guide.sqlite3'}")
    env["AGENTS_RUNTIME"] = "examples.first_agent:runtime"
    server.manage(env, "migrate", "--noinput", "--verbosity", "0", timeout=300)

    out = server.manage(env, "run_agent", "payables", "Pay INV-7 for $250", "--thread", "guide-cli")

    run_id = re.search(r"^run_id: (\S+)$", out, re.MULTILINE)
    assert run_id and "status: suspended" in out
    assert "waiting: ask_cost_centre (input)" in out
    # Parked in the database: another process answers it with the Python API and finds the approval.
    answered = server.manage(
        env,
        "shell",
        "--verbosity",
        "0",
        "-c",
        "from asgiref.sync import async_to_sync\n"
        "from approvals import agents\n"
        "agent = agents.get('payables')\n"
        "stream = async_to_sync(agent.resume_stream)("
        f"{{'cost_centre': 'R&D'}}, run_id={run_id.group(1)!r}, actor='cli')\n"
        "result = async_to_sync(stream.result)()\n"
        "print(result.status, [(c.tool_name, c.requires_approval) for c in result.tool_calls])",
    )
    assert answered.strip() == "suspended [('pay_invoice', True)]"
