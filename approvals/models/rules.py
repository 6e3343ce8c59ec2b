"""Routing rules per agent tool: the Django store's rows for ``agents_runtime.routing``.

A rule is deleted when someone deletes it: what it did stays in the audit log (the rows of the
decisions it took say "rule #N of <user>", and its making, changes and deletion are rows of their
own), so nothing points at this table.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from agents_runtime.routing import Route


class RoutingRule(models.Model):
    agent_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    #: Where among the tool's rules (1: tried first); kept 1..n by the store.
    position = models.PositiveIntegerField()
    route = models.CharField(max_length=8, choices=[(r.value, r.label) for r in Route])
    #: A CEL expression over the call's arguments; empty: any arguments.
    condition = models.TextField(blank=True)
    #: Why, in a sentence: the model is told it when the rule denies a call.
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # SET_NULL keeps the rule (and what it decided) when the account goes; the name stays.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=150)
    changed_at = models.DateTimeField(null=True, blank=True)
    changed_by_name = models.CharField(max_length=150, blank=True)

    class Meta:
        db_table = "approvals_routing_rule"
        ordering = ["agent_id", "tool_name", "position", "id"]
        verbose_name = "routing rule"
        default_permissions = ("view",)
        indexes = [models.Index(fields=["agent_id", "tool_name", "position"], name="rule_order_idx")]

    def __str__(self) -> str:
        return f"rule #{self.pk} of {self.created_by_name}: {self.agent_id}.{self.tool_name} → {self.route}"
