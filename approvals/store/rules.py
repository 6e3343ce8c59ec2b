"""Routing rules in the Django store: keeping, ordering, changing and deleting them, each change with
its audit row in the same transaction (``store.audit.rule_row_values``).

A tool's rules keep positions 1..n: a change renumbers them (``routing.renumbered``) under the lock
of the tool's rows (``select_for_update``: on PostgreSQL two admins placing rules at once queue; on
SQLite the write transaction serialises them).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from agents_runtime.routing import Route, Rule, RuleNotFound, RuleRequest, renumbered
from approvals.models import RoutingRule
from approvals.store.audit import create_decision_row, rule_row_values
from approvals.store.tables import Tables


def rule_of(row: RoutingRule) -> Rule:
    return Rule(
        id=row.pk,
        agent_id=row.agent_id,
        tool_name=row.tool_name,
        position=row.position,
        route=Route(row.route),
        condition=row.condition,
        reason=row.reason,
        created_by=row.created_by_name,
        created_at=row.created_at,
        changed_by=row.changed_by_name or None,
        changed_at=row.changed_at,
    )


class Rules:
    """``RuleStore`` on the ORM: the part of ``DjangoRunStore`` that keeps routing rules."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def _place(self, agent_id: str, tool_name: str, moving: int | None, position: int | None) -> None:
        """Renumber the tool's rules (in the caller's transaction) with ``moving`` at ``position``."""
        rows = RoutingRule.objects.db_manager(self.tables.using)
        tool_rows = rows.select_for_update().filter(agent_id=agent_id, tool_name=tool_name)
        current = list(tool_rows.order_by("position", "id").values_list("id", "position"))
        wanted = renumbered([rule_id for rule_id, _ in current], moving, position)
        for rule_id, at in current:
            if wanted.get(rule_id, at) != at:
                rows.filter(pk=rule_id).update(position=wanted[rule_id])

    def add_rule(self, request: RuleRequest) -> Rule:
        using = self.tables.using
        with self.tables.connection_scope(), transaction.atomic(using=using):
            creator = self.tables.user(request.created_by)
            row = RoutingRule.objects.db_manager(using).create(
                agent_id=request.agent_id,
                tool_name=request.tool_name,
                position=2**31 - 1,
                route=Route(request.route).value,
                condition=request.condition,
                reason=request.reason,
                created_at=request.created_at,
                created_by=creator,
                created_by_name=request.created_by[:150],
            )
            self._place(row.agent_id, row.tool_name, row.pk, request.position)
            rule = rule_of(RoutingRule.objects.db_manager(using).get(pk=row.pk))
            create_decision_row(
                using, rule_row_values(rule, change="added", actor=request.created_by, at=request.created_at)
            )
            return rule

    def change_rule(self, rule_id: int, request: RuleRequest) -> Rule:
        using = self.tables.using
        with self.tables.connection_scope(), transaction.atomic(using=using):
            rows = RoutingRule.objects.db_manager(using)
            row = rows.select_for_update().filter(pk=rule_id).first()
            if row is None or (row.agent_id, row.tool_name) != (request.agent_id, request.tool_name):
                raise RuleNotFound(rule_id)
            rows.filter(pk=rule_id).update(
                route=Route(request.route).value,
                condition=request.condition,
                reason=request.reason,
                changed_at=request.created_at,
                changed_by_name=request.created_by[:150],
            )
            self._place(row.agent_id, row.tool_name, rule_id, request.position or row.position)
            rule = rule_of(rows.get(pk=rule_id))
            create_decision_row(
                using,
                rule_row_values(rule, change="changed", actor=request.created_by, at=request.created_at),
            )
            return rule

    def delete_rule(self, rule_id: int, *, actor: str, at: datetime) -> Rule:
        using = self.tables.using
        with self.tables.connection_scope(), transaction.atomic(using=using):
            rows = RoutingRule.objects.db_manager(using)
            row = rows.select_for_update().filter(pk=rule_id).first()
            if row is None:
                raise RuleNotFound(rule_id)
            rule = rule_of(row)
            row.delete()
            self._place(rule.agent_id, rule.tool_name, None, None)
            create_decision_row(using, rule_row_values(rule, change="deleted", actor=actor, at=at))
            return rule

    def get_rule(self, rule_id: int) -> Rule | None:
        with self.tables.connection_scope():
            row = RoutingRule.objects.db_manager(self.tables.using).filter(pk=rule_id).first()
            return None if row is None else rule_of(row)

    def rules_for(self, agent_id: str, tool_name: str) -> list[Rule]:
        with self.tables.connection_scope():
            rows = RoutingRule.objects.db_manager(self.tables.using).filter(
                agent_id=agent_id, tool_name=tool_name
            )
            return [rule_of(row) for row in rows.order_by("position", "id")]
