"""Accept or Dismiss on a suggested grant: the suggestion's terms, as the page posted them back."""

from __future__ import annotations

from django import forms

from agents_runtime.grants import MAX_CONDITION_LENGTH, GrantScope
from approvals.services.history import Terms


class SuggestionForm(forms.Form):
    agent = forms.CharField(max_length=255)
    tool = forms.CharField(max_length=255)
    scope = forms.ChoiceField(choices=[(s.value, s.label) for s in GrantScope])
    scope_value = forms.CharField(max_length=255, required=False, strip=False)
    condition = forms.CharField(max_length=MAX_CONDITION_LENGTH, required=False, strip=False)

    def terms(self) -> Terms:
        data = self.cleaned_data
        scope = GrantScope(data["scope"])
        return Terms(data["agent"], data["tool"], scope, data["scope_value"], data["condition"])
