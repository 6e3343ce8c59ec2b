"""Emptying the test database after a transactional test: the same end state as Django's, cheaper.

Django's ``TransactionTestCase`` ends each test with ``manage.py flush``: on PostgreSQL one
``TRUNCATE`` of every table (~80 ms for our 42: each table and index gets a new file), then the
``post_migrate`` signal of every app, which writes the content types and permissions the TRUNCATE
removed (~35 ms more; ~12-20 ms a test on SQLite). Most tests of the desk are transactional (the
runtime writes from its own threads, so its writes must commit), so this was a large part of a
PostgreSQL run.

Here the tables are emptied by ``DELETE`` in one transaction (foreign keys are deferred, so order
does not matter; a table's delete triggers, the waiting counters of ``approvals_run``, fire and the
counters are emptied after), except the content types and permissions, which no test changes and
every test would get back as they were. The groups the data migrations make (Reviewers, Admins,
Auditors and their permissions) are put back as they were after the first emptying: by two INSERTs,
where running those migrations again took ~30 ms a test (``users.ensure_groups``), and the next
test starts as a migrated database does. Then ``post_migrate`` is sent for our app only: what it
adds after an emptying is the ``agent:<id>`` group of every agent (``policy.create_agent_groups``);
the other apps' receivers only put back content types and permissions. A test that sets
``available_apps`` or ``serialized_rollback`` gets Django's own flush.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib.auth.models import Group
from django.db import connections, transaction
from django.db.models.signals import post_migrate
from django.test import TransactionTestCase

#: Kept between tests: what ``post_migrate`` would write back, the same rows.
KEPT = frozenset({"django_content_type", "auth_permission"})

_django_teardown = TransactionTestCase._fixture_teardown


def empty(alias: str) -> None:
    """Empty every table of ``alias`` but ``KEPT``, and send our app's ``post_migrate``."""
    connection = connections[alias]
    tables = [
        connection.ops.quote_name(name)
        for name in connection.introspection.django_table_names(only_existing=True, include_views=False)
        if name not in KEPT
    ]
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        # Twice: the first pass's delete triggers may write to a table it had already emptied.
        for _ in range(2):
            for table in tables:
                cursor.execute(f"DELETE FROM {table}")
    _put_back_groups(alias)
    app = apps.get_app_config("approvals")
    post_migrate.send(
        sender=app, app_config=app, verbosity=0, interactive=False, using=alias, apps=apps, plan=None
    )


#: The data migrations' groups and their permissions, by database: ``(groups, permissions)`` rows.
_groups: dict[str, tuple[list[Group], list[Any]]] = {}


def _put_back_groups(alias: str) -> None:
    through = Group.permissions.through
    if alias not in _groups:
        from tests.support.users import ensure_groups

        ensure_groups()
        _groups[alias] = (
            list(Group.objects.using(alias).order_by("pk")),
            list(through.objects.using(alias).order_by("pk")),
        )
        return
    groups, permissions = _groups[alias]
    Group.objects.using(alias).bulk_create(groups)
    through.objects.using(alias).bulk_create(permissions)


def _fixture_teardown(self: Any) -> None:
    if self.available_apps is not None or self.serialized_rollback:
        _django_teardown(self)
        return
    for alias in self._databases_names(include_mirrors=False):
        empty(alias)


def install() -> None:
    """Every transactional test of this process ends with ``empty`` instead of Django's flush."""
    TransactionTestCase._fixture_teardown = _fixture_teardown  # type: ignore[method-assign]
