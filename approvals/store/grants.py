"""Standing grants in the Django store: keeping, revoking and finding them, and taking one use in the
step that records the approval it gives (``Decisions``).

A use is one conditional ``UPDATE ... SET uses = uses + 1`` on the grant's row, guarded by "not
revoked, not used up, not expired", inside the decision's transaction. On PostgreSQL concurrent
uses queue on the row's lock and each re-checks the guard on the row as the one before left it, so
a grant of N uses approves exactly N calls; a revoke is the same row's update, so once it has
committed no use passes the guard. If the decision itself then fails (the call was decided first),
the transaction takes the use back.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import F

from agents_runtime.grants import Grant, GrantNotFound, GrantRequest, GrantScope, narrowest_first
from agents_runtime.untrusted import clean_text
from agents_runtime.vocabulary import DecisionAction
from approvals.models import GrantRecord
from approvals.store.audit import create_decision_row, grant_row_values
from approvals.store.tables import Tables


def grant_of(row: GrantRecord) -> Grant:
    return Grant(
        id=row.pk,
        agent_id=row.agent_id,
        tool_name=row.tool_name,
        scope=GrantScope(row.scope),
        scope_value=row.scope_value or None,
        created_by=row.created_by_name,
        created_at=row.created_at,
        expires_at=row.expires_at,
        max_uses=row.max_uses,
        uses=row.uses,
        condition=row.condition,
        revoked_at=row.revoked_at,
        revoked_by=row.revoked_by_name or None,
        from_run_id=row.from_run_id or None,
        from_tool_call_id=row.from_tool_call_id or None,
        covers_risky=row.covers_risky,
        condition_failures=row.condition_failures,
        last_condition_error=row.last_condition_error or None,
        last_condition_error_at=row.last_condition_error_at,
    )


class Grants:
    """``GrantStore`` on the ORM: the part of ``DjangoRunStore`` that keeps grants. Making and revoking
    one writes its audit row in the same transaction (``store.audit.grant_row_values``)."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def add_grant(self, request: GrantRequest) -> Grant:
        using = self.tables.using
        with self.tables.connection_scope(), transaction.atomic(using=using):
            creator = self.tables.user(request.created_by)
            row = GrantRecord.objects.db_manager(using).create(
                agent_id=request.agent_id,
                tool_name=request.tool_name,
                scope=GrantScope(request.scope).value,
                scope_value=request.scope_value or "",
                condition=request.condition,
                max_uses=request.max_uses,
                expires_at=request.expires_at,
                created_at=request.created_at,
                created_by=creator,
                created_by_name=request.created_by[:150],
                from_run_id=request.from_run_id or "",
                from_tool_call_id=request.from_tool_call_id or "",
                covers_risky=request.covers_risky,
            )
            grant = grant_of(row)
            record = grant_row_values(
                grant, action=DecisionAction.ALLOW, actor=request.created_by, at=request.created_at
            )
            create_decision_row(using, record)
            return grant

    def revoke_grant(self, grant_id: int, *, actor: str, at: datetime) -> Grant:
        using = self.tables.using
        with self.tables.connection_scope(), transaction.atomic(using=using):
            rows = GrantRecord.objects.db_manager(using)
            revoked = rows.filter(pk=grant_id, revoked_at__isnull=True).update(
                revoked_at=at, revoked_by_name=actor[:150]
            )
            row = rows.filter(pk=grant_id).first()
            if row is None:
                raise GrantNotFound(grant_id)
            grant = grant_of(row)
            if revoked:  # revoking twice keeps the first, and its one record
                create_decision_row(
                    using, grant_row_values(grant, action=DecisionAction.REVOKE, actor=actor, at=at)
                )
            return grant

    def get_grant(self, grant_id: int) -> Grant | None:
        with self.tables.connection_scope():
            row = GrantRecord.objects.db_manager(self.tables.using).filter(pk=grant_id).first()
            return None if row is None else grant_of(row)

    def live_grants(
        self, agent_id: str, tool_name: str, *, thread_id: str | None, resource_id: str | None, at: datetime
    ) -> list[Grant]:
        with self.tables.connection_scope():
            rows = GrantRecord.objects.db_manager(self.tables.using).filter(
                agent_id=agent_id, tool_name=tool_name
            )
            grants = [grant_of(row) for row in rows.live(at)]
        return narrowest_first([g for g in grants if g.in_scope(thread_id, resource_id)])

    def note_condition_failure(self, grant_id: int, *, error: str, at: datetime) -> None:
        with self.tables.connection_scope():
            GrantRecord.objects.db_manager(self.tables.using).filter(pk=grant_id).update(
                condition_failures=F("condition_failures") + 1,
                last_condition_error=clean_text(error)[:2000],
                last_condition_error_at=at,
            )

    def take_use(self, grant_id: int, *, agent_id: str, tool_name: str, at: datetime) -> bool:
        """One use of a live grant of this agent's tool, in the caller's transaction."""
        rows = GrantRecord.objects.db_manager(self.tables.using).filter(
            pk=grant_id, agent_id=agent_id, tool_name=tool_name
        )
        return rows.live(at).update(uses=F("uses") + 1) == 1
