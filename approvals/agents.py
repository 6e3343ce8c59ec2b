"""The runtime the dashboard serves, as the rest of the app reaches it.

``ApprovalsConfig.ready()`` loads the runtime named by ``settings.AGENTS_RUNTIME`` and installs it
here once, wired (``approvals.apps.compose``); views, services, queries, consumers, tasks and
commands ask this module for it and for its agents. The only module that imports the run store.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from datetime import datetime
from importlib import import_module
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError

from agents_runtime import Agent, Continuation, ExternalAgent, Runtime, ToolRules
from approvals.models import AGENT_ID, QueueScope
from approvals.models import ExternalAgent as ExternalAgentRow
from approvals.store import DjangoRunStore, QueuePage, QueuePosition, QueueQuery

__all__ = [
    "QueuePage",
    "QueuePosition",
    "QueueQuery",
    "UnknownAgent",
    "aget",
    "all_agents",
    "get",
    "install",
    "load",
    "name_of",
    "queue_page",
    "runtime",
    "serve_external",
    "sync_external",
    "unstarted_continuations",
]

logger = logging.getLogger(__name__)

_installed: Runtime | None = None


class UnknownAgent(LookupError):
    """No agent with this id is registered in the runtime."""


def load(path: str) -> Runtime:
    """Import the ``module:attribute`` that names a ``Runtime`` (the ``AGENTS_RUNTIME`` setting)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"AGENTS_RUNTIME must look like 'module:attribute', not {path!r}")
    runtime = getattr(import_module(module_name), attribute)
    if not isinstance(runtime, Runtime):
        raise TypeError(f"AGENTS_RUNTIME {path!r} is a {type(runtime).__name__}, not a Runtime")
    return runtime


def install(runtime: Runtime) -> Runtime:
    """Serve ``runtime`` from now on; one that brought no store keeps its runs in the database."""
    global _installed
    if not runtime.has_storage:
        runtime.storage = DjangoRunStore(listings_using=settings.LISTINGS_DATABASE)
    _installed = runtime
    return runtime


def runtime() -> Runtime:
    if _installed is None:
        raise RuntimeError("No runtime installed: ApprovalsConfig.ready() installs it at start-up")
    return _installed


def all_agents() -> list[Agent]:
    """Every agent, sub-agents included, in the runtime's order."""
    return runtime().agents


def get(agent_id: str) -> Agent:
    """The agent ``agent_id``; an external agent registered since this process last looked is
    served first (from synchronous code: async code uses ``aget``)."""
    try:
        return runtime().get_agent(agent_id)
    except KeyError:
        pass
    if _on_event_loop() or not _sync_one(agent_id):
        raise UnknownAgent(agent_id)
    return runtime().get_agent(agent_id)


async def aget(agent_id: str) -> Agent:
    """``get`` from async code."""
    try:
        return runtime().get_agent(agent_id)
    except KeyError:
        if not await sync_to_async(_sync_one)(agent_id):
            raise UnknownAgent(agent_id) from None
    return runtime().get_agent(agent_id)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


# -- external agents: registered in the database, served by the runtime -----------------------------


def tool_rules(tools: Any) -> dict[str, ToolRules]:
    """An external agent's tools' rules from their JSON form (``ValueError`` naming the tool)."""
    if not isinstance(tools, Mapping):
        raise ValueError("the tools' rules are a JSON object of tool names")
    rules = {}
    for name, data in tools.items():
        try:
            rules[str(name)] = ToolRules.from_json(data)
        except ValueError as exc:
            raise ValueError(f"tool {name!r}: {exc}") from None
    return rules


def serve_external(row: ExternalAgentRow) -> ExternalAgent:
    """Serve the registered external agent ``row`` (again: its name and rules as they are now);
    ``ValueError`` when an agent of the runtime's own has its id."""
    served = runtime()
    rules = tool_rules(row.tools)
    try:
        existing = served.get_agent(row.agent_id)
    except KeyError:
        agent = ExternalAgent(
            row.agent_id, name=row.name or None, description=row.description or None, tools=rules
        )
        served.add_agent(agent)
        return agent
    if not isinstance(existing, ExternalAgent):
        raise ValueError(f"The runtime already has an agent {row.agent_id!r} of its own")
    existing.update(name=row.name or None, description=row.description or None, tools=rules)
    return existing


def sync_external() -> int:
    """Serve every registered external agent (at start-up, by the sweep, after a registration); how
    many. Nothing when the table is not there yet (before ``migrate``)."""
    try:
        rows = list(ExternalAgentRow.objects.all())
    except DatabaseError:
        return 0
    served = 0
    for row in rows:
        try:
            serve_external(row)
            served += 1
        except ValueError as exc:
            logger.warning("External agent %r is not served: %s", row.agent_id, exc)
    return served


def _sync_one(agent_id: str) -> bool:
    # Only what could have been registered is looked up: an id from a URL or a form may hold what
    # the database cannot even compare (PostgreSQL refuses a NUL in a query's text).
    if re.fullmatch(AGENT_ID.regex, agent_id) is None:
        return False
    row = ExternalAgentRow.objects.filter(agent_id=agent_id).first()
    if row is None:
        return False
    try:
        serve_external(row)
    except ValueError as exc:
        logger.warning("External agent %r is not served: %s", agent_id, exc)
        return False
    return True


def name_of(agent_id: str) -> str:
    """What people read for an agent: its name, or its id when it has none (or is no longer
    served: an old audit row's)."""
    try:
        return get(agent_id).name or agent_id
    except UnknownAgent:
        return agent_id


def unstarted_continuations(*, decided_before: datetime) -> list[Continuation]:
    """Decided runs whose continuation never started, though their last decision was before
    ``decided_before`` (only the database store can tell; a runtime's own store keeps none)."""
    store = runtime().storage
    if not isinstance(store, DjangoRunStore):
        return []
    return store.unstarted_claims(decided_before=decided_before)


def queue_page(query: QueueQuery) -> QueuePage:
    """A page of the reviewer's queue across agents (``approvals.store.queue_page``). Only the database
    store keeps one; a runtime that brought its own store has none."""
    store = runtime().storage
    if not isinstance(store, DjangoRunStore):
        return QueuePage(runs=[], positions=[], next_after=None)
    return store.queue(query)


def queue_names(scope: QueueScope, column: str, limit: int) -> list[str]:
    """Threads (``column`` "thread_id") or end users ("resource_id") the reviewer's queue waits on,
    to suggest in its filters (``approvals.store.queue_names``); none without the database store."""
    store = runtime().storage
    if not isinstance(store, DjangoRunStore):
        return []
    return store.queue_names(scope, column, limit)
