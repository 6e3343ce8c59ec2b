"""A user's notification preference: the form of the account's Notifications page, and its checks.

A chat webhook URL is somewhere the server will POST to, so it is checked: https only, and never this
machine or a private network, unless ``COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS`` is on (``outbound``); and on
one of ``NOTIFY_CHAT_HOSTS`` when any are named.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.core.exceptions import ValidationError

from approvals.models import Notification, NotificationPreference
from approvals.notifications import options
from approvals.outbound.posting import refused_as_typed


def check_chat_url(url: str) -> None:
    hosts = options.chat_hosts()
    if hosts and (urlsplit(url).hostname or "").lower() not in hosts:
        raise ValidationError(f"Chat webhooks may only go to: {', '.join(hosts)}.")
    refused = refused_as_typed(url, what="Chat webhooks", https_only=True)
    if refused:
        raise ValidationError(refused)


class PreferenceForm(forms.ModelForm[NotificationPreference]):
    class Meta:
        model = NotificationPreference
        fields = ["mode", "email", "chat_url", "digest_minutes"]
        labels = {"mode": "Tell me", "email": "By email", "digest_minutes": "Digest every (minutes)"}
        help_texts = {"digest_minutes": "With “a digest”: how often it comes."}
        widgets = {"mode": forms.RadioSelect}

    def clean_chat_url(self) -> str:
        url: str = self.cleaned_data.get("chat_url") or ""
        if url:
            check_chat_url(url)
        return url


def preference_of(user: Any) -> NotificationPreference:
    """The user's saved preference, or the defaults (unsaved)."""
    return NotificationPreference.objects.filter(user=user).first() or NotificationPreference(user=user)


def recent(user: Any, count: int = 10) -> list[Notification]:
    """The user's latest notifications, for the page's record."""
    return list(Notification.objects.filter(recipient=user).order_by("-created_at", "-id")[:count])
