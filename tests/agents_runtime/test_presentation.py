"""What a reviewer sees of a call, from the tool's metadata: titles, money, risky values, the
approval rule's reason, and why the call waits (gathered when the run parks)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from agents_runtime import (
    Agent,
    Call,
    InMemoryRunStore,
    Reply,
    Runtime,
    ToolContext,
    needs_confirmation,
    scripted_model,
    tool,
)
from agents_runtime.presentation import ApprovalRule, Money, default_title, format_title

MONEY = {"amount_cents": Money(cents=True, currency="USD")}


def test_title_template_substitutes_top_level_args_and_formats_money() -> None:
    args = {"amount_cents": 89_000, "order_id": "A-1044"}

    assert format_title("Refund {amount_cents|money} · {order_id}", args, MONEY) == "Refund $890.00 · A-1044"
    # Money without a hint: the plain amount in dollars.
    assert format_title("{amount_cents|money}", {"amount_cents": 1250}, {}) == "$1,250.00"
    assert Money(currency="EUR", cents=True).format(-1999) == "-€19.99"
    assert Money(currency="CHF").format(12.5) == "12.50 CHF"


def test_money_has_its_currencys_decimals_and_is_never_rounded() -> None:
    assert Money(currency="JPY", cents=True).format(89_000) == "¥89,000"
    assert Money(currency="KWD", cents=True).format(1_234_567) == "1,234.567 KWD"
    assert Money(currency="USD", cents=True).format(12.5) == "$0.125"
    assert Money(currency="USD", cents=True).format(10**30) == f"${10**28:,}.00"


def test_a_schema_annotation_is_money_only_with_its_currency_and_unit() -> None:
    assert Money.from_annotation({"currency": "usd", "unit": "minor"}) == Money(currency="USD", cents=True)
    assert Money.from_annotation({"currency": "EUR", "unit": "major"}) == Money(currency="EUR")
    assert Money.from_annotation({"currency": "USD"}) is None  # the unit is never guessed
    assert Money.from_annotation({"currency": "dollars", "unit": "minor"}) is None
    assert Money(currency="EUR", cents=True).annotation() == {"currency": "EUR", "unit": "minor"}


def test_title_template_never_reaches_past_a_top_level_value() -> None:
    args: dict[str, Any] = {"order_id": "A-1", "nested": {"secret": "s3cr3t"}}

    title = format_title(
        "{order_id.__class__} {order_id[0]} {nested} {missing} {order_id:>20} {{x}}", args, {}
    )

    assert title == "{order_id.__class__} {order_id[0]} … … {order_id:>20} {x}"
    assert "s3cr3t" not in title and "str" not in title


def test_titles_are_shortened_and_on_one_line() -> None:
    long = "line one\nline two " + "x" * 500

    title = format_title("Note {note}", {"note": long}, {})

    assert "\n" not in title and len(title) <= 120 and title.endswith("…")


def test_default_title_is_the_tool_in_words_and_its_first_scalar_args() -> None:
    args = {"order_id": "A-1044", "items": [1, 2], "amount_cents": 89_000, "express": True, "note": "later"}

    assert default_title("issue_refund", args, MONEY) == "Issue refund · A-1044 · $890.00 · yes"


def test_a_callable_title_that_fails_falls_back_to_the_default() -> None:
    @tool(requires_approval=True, title=lambda args: args["nope"])
    def wipe(disk: str) -> str:
        return disk

    @tool(requires_approval=True, title=lambda args: f"Wipe {args['disk'].upper()}")
    def wipe_upper(disk: str) -> str:
        return disk

    assert wipe.title_for({"disk": "sda"}) == "Wipe · sda"
    assert wipe_upper.title_for({"disk": "sda"}) == "Wipe SDA"


def test_money_hints_come_from_annotated_parameters_too() -> None:
    @tool
    def refund(amount_cents: Annotated[int, Money(cents=True, currency="GBP")], order_id: str) -> str:
        return order_id

    assert refund.title_for({"amount_cents": 500, "order_id": "A-1"}) == "Refund · £5.00 · A-1"


def test_risky_values_need_confirmation_and_confirm_true_always_does() -> None:
    @tool(requires_approval=True, risky={"environment": ["production"]})
    def deploy(service: str, environment: Literal["staging", "production"]) -> str:
        return service

    @tool(requires_approval=True, confirm=True)
    def wipe(disk: str) -> str:
        return disk

    assert deploy.risky_values({"service": "api", "environment": "production"}) == {
        "environment": "production"
    }
    assert needs_confirmation(deploy, {"service": "api", "environment": "production"})
    assert not needs_confirmation(deploy, {"service": "api", "environment": "staging"})
    assert needs_confirmation(deploy, {"environment": "staging"}, {"environment": "production"})
    assert wipe.confirm and needs_confirmation(wipe, {"disk": "sda"})


def test_approval_rule_says_why_and_a_rule_returning_text_asks_for_approval() -> None:
    @tool(
        requires_approval=ApprovalRule(
            lambda a: a["amount_cents"] > 5000, because="Refunds over $50 need approval"
        )
    )
    def refund(amount_cents: int) -> str:
        return "ok"

    @tool(requires_approval=lambda a: "Over the limit" if a["amount"] > 10 else None)
    def transfer(amount: int) -> str:
        return "ok"

    assert refund.approval({"amount_cents": 9000}) == (True, "Refunds over $50 need approval")
    assert refund.approval({"amount_cents": 100}) == (False, "")
    assert transfer.approval({"amount": 11}) == (True, "Over the limit")
    assert transfer.approval({"amount": 1}) == (False, "")


def test_parameters_json_schema_describes_the_model_supplied_arguments() -> None:
    @tool(requires_approval=True)
    def deploy(
        ctx: ToolContext, service: str, environment: Literal["staging", "production"], replicas: int = 2
    ) -> str:
        return service

    schema = deploy.parameters_json_schema

    assert set(schema["properties"]) == {"service", "environment", "replicas"}
    assert schema["properties"]["environment"]["enum"] == ["staging", "production"]
    assert set(schema["required"]) == {"service", "environment"}


async def test_a_parked_call_carries_why_it_waits() -> None:
    @tool(key_results=("status", "total_cents"))
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order."""
        return {"order_id": order_id, "status": "shipped", "total_cents": 89_000, "internal": "x"}

    @tool(requires_approval=ApprovalRule(because="Refunds need approval"), fields=MONEY)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        return "refunded"

    model = scripted_model(
        Call("lookup_order", {"order_id": "A-1044"}, say="Looking it up."),
        Call(
            "issue_refund", {"order_id": "A-1044", "amount_cents": 89_000}, say="Refunding the whole order."
        ),
        Reply("Done."),
    )
    agent = Agent("support", model=model, tools=[lookup_order, issue_refund])
    Runtime(agents=[agent], storage=InMemoryRunStore())

    result = await agent.generate("Refund A-1044 please, it never came")
    [call] = (await agent.list_suspended_runs()).runs[0].tool_calls

    assert result.status == "suspended" and call.context is not None
    assert call.context.user_message == "Refund A-1044 please, it never came"
    assert call.context.agent_said == "Refunding the whole order."
    assert [(r.tool_name, r.values) for r in call.context.key_results] == [
        ("lookup_order", {"status": "shipped", "total_cents": 89_000})
    ]
    assert call.context.approval_reason == "Refunds need approval"


async def test_a_follow_up_question_carries_the_answer_given_before_it() -> None:
    @tool(resume_schema={"type": "object", "properties": {"when": {"type": "string"}}, "required": ["when"]})
    def ask(ctx: ToolContext, topic: str) -> str:
        if ctx.resume_data is None:
            ctx.suspend({"question": f"When for {topic}?"})
        return f"{topic} at {ctx.resume_data['when']}"

    model = scripted_model(Call("ask", {"topic": "deploy"}), Call("ask", {"topic": "rollback"}), Reply("ok"))
    agent = Agent("ops", model=model, tools=[ask])
    Runtime(agents=[agent], storage=InMemoryRunStore())
    first = await agent.generate("plan it")
    stream = await agent.resume_stream({"when": "22:00"}, run_id=first.run_id)
    await stream.result()

    [call] = (await agent.list_suspended_runs()).runs[0].tool_calls

    assert call.context is not None
    [answer] = call.context.previous_answers
    assert (answer.question, answer.answer) == ("When for deploy?", {"when": "22:00"})


async def test_a_sub_agents_inner_runs_can_be_listed_apart() -> None:
    @tool(requires_approval=True)
    def wipe_disk(disk: str) -> str:
        return disk

    worker = Agent(
        "worker", name="Worker", model=scripted_model(Call("wipe_disk", {"disk": "sda"})), tools=[wipe_disk]
    )
    boss = Agent("boss", model=scripted_model(Call("agent_worker", {"prompt": "wipe"})), agents=[worker])
    Runtime(agents=[boss], storage=InMemoryRunStore())
    await boss.generate("wipe it")

    [mirrored] = (await boss.list_suspended_runs()).runs[0].tool_calls

    assert mirrored.via_agent_id == "worker"
    assert (await worker.list_suspended_runs()).total == 1
    assert (await worker.list_suspended_runs(delegated=False)).total == 0
    assert (await worker.list_suspended_runs(delegated=True)).total == 1
