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
#: Digits of the whole part past which an amount is not read as money (its text shows as written):
#: Decimal arithmetic past the context's exponent limits raises, and writing 1e999999999 out would
#: take a gigabyte.
MAX_MONEY_DIGITS = 1_000
#: How many scalar arguments the default title shows.
DEFAULT_TITLE_ARGS = 3

_CURRENCY_SIGNS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}
#: ISO 4217 digits of the minor unit of the currencies that do not have two (a yen has no cents, a
#: Kuwaiti dinar has 1,000 fils).
_MINOR_DIGITS = {
    **dict.fromkeys(["BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW"], 0),
    **dict.fromkeys(["PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF"], 0),
    **dict.fromkeys(["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"], 3),
}
#: The JSON Schema keyword that marks a property as money: ``{"currency": "USD", "unit": "minor"}``.
MONEY_KEYWORD = "x-money"
_CURRENCY_CODE = re.compile(r"[A-Z]{3}")
#: ``{name}`` or ``{name|money}``; ``{{`` and ``}}`` are literal braces.
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)(?:\|([a-z]+))?\}")


@dataclass(frozen=True)
class Money:
    """A field that holds an amount of money in ``currency``: ``cents=True`` when it counts the
    currency's minor unit (cents of a dollar, yen, fils of a dinar: ISO 4217's), False in major units.

    Give it in ``tool(fields={"amount_cents": Money(cents=True, currency="USD")})`` or as metadata of
    the parameter's annotation: ``amount_cents: Annotated[int, Money(cents=True)]``. A JSON Schema says
    the same with ``"x-money": {"currency": "USD", "unit": "minor"}`` on the property
    (``Money.from_annotation``); ``money_of`` reads either.
    """

    currency: str = "USD"
    cents: bool = False

    @property
    def code(self) -> str:
        return self.currency.upper()

    @property
    def unit(self) -> str:
        """``minor`` or ``major``: the unit the tool's value counts."""
        return "minor" if self.cents else "major"

    @property
    def digits(self) -> int:
        """Decimals of an amount in major units (2 for USD, 0 for JPY, 3 for KWD)."""
        return _MINOR_DIGITS.get(self.code, 2)

    @property
    def sign(self) -> str:
        """``$`` where the currency has a sign people read, else its code (``CHF``)."""
        return _CURRENCY_SIGNS.get(self.code, self.code)

    def annotation(self) -> dict[str, str]:
        """This hint as the schema keyword's value (``{"currency": "USD", "unit": "minor"}``)."""
        return {"currency": self.code, "unit": self.unit}

    @classmethod
    def from_annotation(cls, value: Any) -> Money | None:
        """The ``x-money`` keyword's value as a hint; None unless it names a three-letter currency
        and a ``unit`` of ``minor`` or ``major`` (the unit is never guessed)."""
        if not isinstance(value, Mapping):
            return None
        currency, unit = value.get("currency"), value.get("unit")
        if not isinstance(currency, str) or not _CURRENCY_CODE.fullmatch(currency.upper()):
            return None
        if unit not in ("minor", "major"):
            return None
        return cls(currency=currency.upper(), cents=unit == "minor")

    def major(self, value: Any) -> Decimal | None:
        """The amount ``value`` (as the tool holds it) in major units, exactly; None if not a number."""
        if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
            return None
        try:
            amount = Decimal(str(value).strip())
        except InvalidOperation:
            return None
        if not amount.is_finite() or abs(amount.adjusted()) > MAX_MONEY_DIGITS:
            return None
        return _shift(amount, -self.digits) if self.cents else amount

    def stored(self, major: Decimal) -> Decimal:
        """An amount in major units as the tool holds it (minor units: 40.5 USD is 4050).

        Raises ``ValueError`` when it has more decimals than the currency (40.505 USD, 40.5 JPY).
        """
        if _decimals(major) > self.digits:
            raise ValueError(f"{self.code} amounts have {_decimals_words(self.digits)}")
        # Whole by now: written without an exponent (4.05E+3 is 4050).
        return _shift(major, self.digits).quantize(Decimal(1)) if self.cents else major

    def plain(self, value: Any) -> str | None:
        """``value`` in major units without sign or separators (``890.00``): what an input shows."""
        amount = self.major(value)
        if amount is None:
            return None
        return f"{amount:.{max(self.digits, _decimals(amount))}f}"

    def format(self, value: Any) -> str | None:
        """``$890.00`` / ``890.00 CHF``; None when ``value`` is not a number. Never rounded: an
        amount with more decimals than its currency shows them all."""
        amount = self.major(value)
        if amount is None:
            return None
        sign = "-" if amount.is_signed() and amount else ""
        # ``copy_abs``, not ``abs()``: that rounds to the context's 28 digits (and traps Overflow).
        text = f"{amount.copy_abs():,.{max(self.digits, _decimals(amount))}f}"
        symbol = _CURRENCY_SIGNS.get(self.code)
        return f"{sign}{symbol}{text}" if symbol else f"{sign}{text} {self.code}"


def _shift(amount: Decimal, places: int) -> Decimal:
    """``amount`` times 10**``places``, exactly (``scaleb`` rounds to the context's precision)."""
    sign, digits, exponent = amount.as_tuple()
    return Decimal((sign, digits, exponent + places)) if isinstance(exponent, int) else amount


def _decimals(amount: Decimal) -> int:
    """Decimals ``amount`` needs (``40.50``: 1), exactly (``normalize`` would round to the context's
    precision: 40.000...0001 would read as 40)."""
    _, digits, exponent = amount.as_tuple()
    if not isinstance(exponent, int) or exponent >= 0:
        return 0
    zeros = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    return max(0, -exponent - zeros)


def _decimals_words(digits: int) -> str:
    return "no decimals" if digits == 0 else f"at most {digits} decimal{'s' if digits > 1 else ''}"


def money_of(name: str, schema: Any, hints: Mapping[str, Any]) -> Money | None:
    """Whether a field is money, and how: the tool's ``Money`` hint for ``name``, else the
    ``x-money`` annotation of the field's JSON Schema ``schema``. Every reader asks this."""
    hint = hints.get(name)
    if isinstance(hint, Money):
        return hint
    return Money.from_annotation(schema.get(MONEY_KEYWORD)) if isinstance(schema, Mapping) else None


def money_fields(schema: Any, hints: Mapping[str, Any]) -> dict[str, Money]:
    """Every money field a tool names: its hints (arguments and result fields alike), and the
    top-level properties of its parameters' JSON Schema ``schema`` annotated ``x-money``."""
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    props = props if isinstance(props, Mapping) else {}
    found = {name: hint for name, hint in hints.items() if isinstance(hint, Money)}
    for name, prop in props.items():
        money = money_of(str(name), prop, hints)
        if money is not None:
            found[str(name)] = money
    return found


def with_money(schema: Mapping[str, Any], money: Mapping[str, Money]) -> dict[str, Any]:
    """``schema`` with each money property annotated ``x-money`` (a copy): what the edit form is built
    from, so a tool's Python hints and a schema's annotations are read alike. Not what the model sees."""
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not any(name in props for name in money):
        return dict(schema)
    annotated = {
        name: {**prop, MONEY_KEYWORD: money[name].annotation()}
        if name in money and isinstance(prop, Mapping)
        else prop
        for name, prop in props.items()
    }
    return {**schema, "properties": annotated}


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
