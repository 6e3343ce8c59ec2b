"""Users of the dashboard tests, in the groups the data migrations create."""

from __future__ import annotations

from importlib import import_module

from django.apps import apps as django_apps
from django.contrib.auth.models import Group, User
from django.test import Client

from approvals.policy import ALL_AGENTS_GROUPS

PASSWORD = "correct horse battery staple"


def ensure_groups() -> None:
    """Groups come from data migrations; a transactional test's emptying removes them, so re-run
    those (once a test: ~30 ms, seven of them, so not for each user a test makes)."""
    if Group.objects.filter(name__in=ALL_AGENTS_GROUPS).count() == len(ALL_AGENTS_GROUPS):
        return
    import_module("approvals.migrations.0003_groups").create_groups(django_apps, None)
    import_module("approvals.migrations.0010_admins_manage_users").grant(django_apps, None)
    import_module("approvals.migrations.0018_admins_manage_webhooks").grant(django_apps, None)
    import_module("approvals.migrations.0022_grants").admins_manage_grants(django_apps, None)
    import_module("approvals.migrations.0030_auditors").create_auditors(django_apps, None)
    import_module("approvals.migrations.0037_admins_register_external_agents").grant(django_apps, None)
    import_module("approvals.migrations.0043_grant_suggestions").admins_read_suggestions(django_apps, None)


def make_user(username: str, *groups: str) -> User:
    ensure_groups()
    user = User.objects.create_user(username=username, password=PASSWORD)
    for name in groups:
        user.groups.add(Group.objects.get(name=name))
    return user


def signed_in(user: User) -> Client:
    """A test client signed in as ``user``."""
    client = Client()
    client.force_login(user)
    return client
