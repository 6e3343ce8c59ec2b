"""The routing rule form: which agent and tool, when, what to do, why, and where among its rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import forms

from agents_runtime.conditions import MAX_CONDITION_LENGTH
from agents_runtime.routing import MAX_REASON_LENGTH, Route
from approvals.services.rules import RuleTerms


class RuleForm(forms.Form):
    """``tools``: the ("agent id", "tool name") pairs the user may make rules for."""

    tool = forms.ChoiceField(label="Agent · tool", choices=())
    route = forms.ChoiceField(
        label="Then", choices=[(r.value, r.label) for r in Route], initial=Route.ONE.value
    )
    condition = forms.CharField(
        label="When the arguments match",
        required=False,
        max_length=MAX_CONDITION_LENGTH,
        strip=True,
        help_text=(
            "Optional (empty: every call). A CEL expression, e.g. amount_cents < 500 or "
            'environment == "production".'
        ),
    )
    reason = forms.CharField(
        label="Why",
        required=False,
        max_length=MAX_REASON_LENGTH,
        strip=True,
        help_text="The model is told it when the rule denies a call.",
    )
    position = forms.IntegerField(
        label="Position",
        required=False,
        min_value=1,
        max_value=10_000,
        help_text="1 is tried first; empty: after the tool's other rules.",
    )

    def __init__(self, *args: Any, tools: Sequence[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["tool"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(f"{agent_id}:{tool}", f"{agent_id} · {tool}") for agent_id, tool in tools]

    def agent_and_terms(self) -> tuple[str, RuleTerms]:
        """The agent id and the rule's terms (a valid form only)."""
        agent_id, _, tool_name = self.cleaned_data["tool"].partition(":")
        terms = RuleTerms(
            tool_name=tool_name,
            route=Route(self.cleaned_data["route"]),
            condition=self.cleaned_data["condition"] or "",
            reason=self.cleaned_data["reason"] or "",
            position=self.cleaned_data["position"],
        )
        return agent_id, terms
