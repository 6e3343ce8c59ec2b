"""The runtime the dashboard serves, as the rest of the app reaches it.

``ApprovalsConfig.ready()`` loads the runtime named by ``settings.AGENTS_RUNTIME`` and installs it
here once, wired (``approvals.apps.compose``); views, services, queries, consumers, tasks and
commands ask this module for it and for its agents. The only module that imports the run store.
"""

from __future__ import annotations

from datetime import datetime
from importlib import import_module

from django.conf import settings

from agents_runtime import Agent, AgentRun, Continuation, Runtime, agent_run
from approvals.store import DjangoRunStore
from approvals.store.queue import QueuePage, QueuePosition, QueueQuery

__all__ = [
    "QueuePage",
    "QueuePosition",
    "QueueQuery",
    "UnknownAgent",
    "all_agents",
    "get",
    "install",
    "load",
    "name_of",
    "queue_page",
    "runtime",
    "unstarted_continuations",
]

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
    try:
        return runtime().get_agent(agent_id)
    except KeyError:
        raise UnknownAgent(agent_id) from None


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


def queue_page(query: QueueQuery) -> tuple[list[AgentRun], QueuePage]:
    """A page of the reviewer's queue across agents (``approvals.store.queue``), its runs as listings
    show them. Only the database store keeps one; a runtime that brought its own store has none."""
    store = runtime().storage
    if not isinstance(store, DjangoRunStore):
        return [], QueuePage(runs=[], positions=[], more=False)
    page = store.queue(query)
    return [agent_run(run) for run in page.runs], page
