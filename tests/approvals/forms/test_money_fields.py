"""Money in a form built from a schema: typed in major units with its currency, answered exactly as the
tool holds it (minor units: 40.50 USD is 4050), bad amounts refused next to the field.

A property is money by its ``x-money`` annotation; a tool's ``Money`` hint becomes that annotation on
the edit form's schema (``cards.call.args_form_class``), so both spellings give the same form.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import Field

from agents_runtime import tool
from agents_runtime.presentation import Money
from approvals.cards.call import args_form_class
from approvals.cards.fields import unbound_fields
from approvals.forms.schema import MoneyField, resume_form_class


def money_schema(currency: str = "USD", unit: str = "minor", **prop: Any) -> dict[str, Any]:
    kind = prop.pop("type", "integer")
    return {
        "type": "object",
        "properties": {"amount": {"type": kind, "x-money": {"currency": currency, "unit": unit}, **prop}},
        "required": ["amount"],
    }


def answer(schema: dict[str, Any], typed: str) -> tuple[Any, dict[str, list[str]]]:
    form = resume_form_class(schema)(data={"amount": typed})
    form.is_valid()
    return form.resume_data, {k: list(v) for k, v in form.errors.items()}


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("40", 4000),
        ("40.5", 4050),
        ("40.50", 4050),
        # Decimal, not float: 0.29 * 100 is 28.999999999999996 in floats.
        ("0.29", 29),
        ("$1,250.00", 125_000),
        (" USD 19.99 ", 1999),
        ("-5", -500),  # the schema allows it
    ],
)
def test_an_amount_typed_in_dollars_is_answered_in_cents(typed: str, stored: int) -> None:
    data, errors = answer(money_schema(), typed)

    assert errors == {}
    assert data == {"amount": stored} and type(data["amount"]) is int


@pytest.mark.parametrize(
    ("schema", "typed", "error"),
    [
        (money_schema(), "forty", "Enter an amount in USD, such as $40.00."),
        (money_schema(), "40,50", "Enter an amount in USD, such as $40.00."),  # never read as 4,050
        (money_schema(), "40.505", "USD amounts have at most 2 decimals: enter e.g. $40.50."),
        (money_schema(), "40." + "0" * 60 + "1", "USD amounts have at most 2 decimals: enter e.g. $40.00."),
        (money_schema(), "9" * 40, "This amount is too large."),
        (money_schema("JPY"), "40.5", "JPY amounts have no decimals: enter e.g. ¥40."),
        (money_schema(minimum=0), "-1", "Enter an amount of at least $0.00."),
        (money_schema(exclusiveMinimum=0), "0", "Enter an amount of more than $0.00."),
        (money_schema(maximum=100_000), "1000.01", "Enter an amount of at most $1,000.00."),
        (money_schema("EUR", "major"), "12.5", "Enter a whole amount of EUR: this tool takes no fractions."),
    ],
)
def test_a_bad_amount_is_a_clear_error_and_no_answer(schema: dict[str, Any], typed: str, error: str) -> None:
    data, errors = answer(schema, typed)

    assert data is None
    assert errors == {"amount": [error]}


def test_other_currencies_and_major_units() -> None:
    assert answer(money_schema("JPY"), "4,000")[0] == {"amount": 4000}
    assert answer(money_schema("KWD"), "1.005")[0] == {"amount": 1005}
    assert answer(money_schema("EUR", "major", type="number"), "12.5")[0] == {"amount": 12.5}
    assert answer(money_schema("EUR", "major", type="string"), "12.50")[0] == {"amount": "12.50"}


def test_an_annotation_without_its_unit_is_no_money() -> None:
    schema = money_schema()
    del schema["properties"]["amount"]["x-money"]["unit"]

    assert not isinstance(resume_form_class(schema).base_fields["amount"], MoneyField)
    assert answer(schema, "40") == ({"amount": 40}, {})


@tool(requires_approval=True, fields={"amount_cents": Money(currency="USD", cents=True)})
def refund_by_hint(order_id: str, amount_cents: Annotated[int, Field(ge=0)]) -> str:
    return order_id


_ANNOTATED = {"x-money": {"currency": "USD", "unit": "minor"}}


@tool(requires_approval=True)
def refund_by_schema(
    order_id: str, amount_cents: Annotated[int, Field(ge=0, json_schema_extra=_ANNOTATED)]
) -> str:
    return order_id


@pytest.mark.parametrize("refund", [refund_by_hint, refund_by_schema], ids=["hint", "schema"])
def test_the_edit_form_shows_and_takes_money_alike_from_a_hint_or_the_schema(refund: Any) -> None:
    form_class = args_form_class(refund)
    assert form_class is not None

    shown = {
        f.name: (f.label, f.value, f.unit, f.help_text)
        for f in unbound_fields(
            form_class, auto_id="c-%s", prefix="args", initial={"order_id": "A-1", "amount_cents": 89_000}
        )
    }
    posted = form_class(data={"args-order_id": "A-1", "args-amount_cents": "40"}, prefix="args")
    negative = form_class(data={"args-order_id": "A-1", "args-amount_cents": "-40"}, prefix="args")

    # Typed in dollars: the label no longer says cents, the help says the currency.
    assert shown["args-amount_cents"] == ("Amount", "890.00", "$", "In USD, e.g. 40 or 40.50.")
    assert shown["args-order_id"] == ("Order Id", "A-1", "", "")
    assert posted.is_valid() and posted.resume_data == {"order_id": "A-1", "amount_cents": 4000}
    assert not negative.is_valid() and negative.errors == {
        "amount_cents": ["Enter an amount of at least $0.00."]
    }
