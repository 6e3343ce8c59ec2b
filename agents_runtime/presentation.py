"""How a tool's calls read to a reviewer: a title, field hints (money), risky values, key results, and
why a call needs approval.

All of it is metadata a tool author gives ``tool(...)``; none of it changes what the model sees or
what the tool runs with. Arguments are model output: titles substitute top-level argument values as
text (no attribute access, no format specs, nothing evaluated) and are shortened.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

#: A title never grows past this (characters); a substituted value past ``TITLE_VALUE_CHARS``.
TITLE_CHARS = 120
TITLE_VALUE_CHARS = 40
#: How many scalar arguments the default title shows.
DEFAULT_TITLE_ARGS = 3

_CURRENCY_SIGNS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}
#: ``{name}`` or ``{name|money}``; ``{{`` and ``}}`` are literal braces.
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)(?:\|([a-z]+))?\}")


@dataclass(frozen=True)
class Money:
    """A field that holds an amount of money: ``cents=True`` when it counts the currency's minor unit.

    Give it in ``tool(fields={"amount_cents": Money(cents=True, currency="USD")})`` or as metadata of
    the parameter's annotation: ``amount_cents: Annotated[int, Money(cents=True)]``.
    """

    currency: str = "USD"
    cents: bool = False

    def format(self, value: Any) -> str | None:
        """``$890.00`` / ``890.00 CHF``; None when ``value`` is not a number."""
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return None
        try:
            amount = Decimal(str(value))
        except InvalidOperation:
            return None
        if not amount.is_finite():
            return None
        if self.cents:
            amount = amount / 100
        sign = "-" if amount < 0 else ""
        text = f"{abs(amount):,.2f}"
        symbol = _CURRENCY_SIGNS.get(self.currency.upper())
        return f"{sign}{symbol}{text}" if symbol else f"{sign}{text} {self.currency.upper()}"


#: What a field hint can be (one kind today; the name leaves room for more).
FieldHint = Money


@dataclass(frozen=True)
class ApprovalRule:
    """``requires_approval`` with its explanation, shown to the reviewer on every card it parks.

    ``when`` is True (always) or a callable that gets the arguments and returns whether this call
    needs approval: ``ApprovalRule(lambda a: a["amount_cents"] > 5000, because="Refunds over $50
    need approval")``. A rule that returns a string instead of True needs approval for that reason.
    """

    when: bool | Callable[[dict[str, Any]], Any] = True
    because: str = ""


def approval_reason(rule: Any, args: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether ``rule`` asks for approval of a call with ``args``, and why ("" when it does not say).

    A rule that raises needs approval: a rule that cannot decide must not let the call through.
    """
    because = ""
    if isinstance(rule, ApprovalRule):
        because = rule.because
        rule = rule.when
    if isinstance(rule, bool):
        return rule, because if rule else ""
    try:
        verdict = rule(dict(args))
    except Exception:
        return True, "Its approval rule failed, so it needs approval."
    if isinstance(verdict, str):
        return bool(verdict), verdict or ""
    return bool(verdict), because if verdict else ""


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _scalar_text(value: Any, hint: FieldHint | None, as_money: bool) -> str | None:
    if (as_money or hint is not None) and isinstance(hint, Money):
        money = hint.format(value)
        if money is not None:
            return money
    if as_money:
        money = Money().format(value)
        if money is not None:
            return money
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return "yes" if value else "no"
    return _shorten(str(value), TITLE_VALUE_CHARS)


def humanise(name: str) -> str:
    words = name.replace("_", " ").replace("-", " ").strip()
    return (words[:1].upper() + words[1:]) if words else name


def default_title(tool_name: str, args: Mapping[str, Any], hints: Mapping[str, FieldHint]) -> str:
    """The tool's name in words and its first few scalar arguments: "Issue refund · A-1044 · $890.00"."""
    parts = [humanise(tool_name)]
    for name, value in args.items():
        if len(parts) > DEFAULT_TITLE_ARGS:
            break
        shown = _scalar_text(value, hints.get(name), as_money=False)
        if shown:
            parts.append(shown)
    return _shorten(" · ".join(parts), TITLE_CHARS)


def format_title(template: str, args: Mapping[str, Any], hints: Mapping[str, FieldHint]) -> str:
    """``template`` with ``{name}`` / ``{name|money}`` replaced by the top-level argument's text.

    Only plain names of top-level arguments are substituted (no ``{a.b}``, ``{a[0]}`` or format
    specs: anything else stays as written); a missing or non-scalar value reads "…".
    """

    def substitute(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        name, flag = match.group(1), match.group(2)
        if flag not in (None, "money"):
            return token
        shown = _scalar_text(args.get(name), hints.get(name), as_money=flag == "money")
        return shown if shown else "…"

    return _shorten(_PLACEHOLDER.sub(substitute, template), TITLE_CHARS)


def title_for(
    title: str | Callable[[dict[str, Any]], str] | None,
    tool_name: str,
    args: Mapping[str, Any] | None,
    hints: Mapping[str, FieldHint],
) -> str:
    """A call's title: the tool's template or callable, else the default; never raises."""
    args = args if isinstance(args, Mapping) else {}
    if isinstance(title, str):
        return format_title(title, args, hints)
    if callable(title):
        try:
            made = title(dict(args))
        except Exception:
            made = None
        if isinstance(made, str) and made.strip():
            return _shorten(made, TITLE_CHARS)
    return default_title(tool_name, args, hints)
