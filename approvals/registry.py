"""Which runtime (and so which agents) the dashboard serves: the ``AGENTS_RUNTIME`` setting."""

from __future__ import annotations

from functools import cache
from importlib import import_module

from django.conf import settings

from agents_runtime import Runtime


@cache
def get_runtime() -> Runtime:
    """Import the ``module:attribute`` named by ``settings.AGENTS_RUNTIME`` once per process.

    The dashboard wires it on first use: run events go to live pages, and decided runs continue
    in ``django.tasks`` tasks.
    """
    path: str = settings.AGENTS_RUNTIME
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"AGENTS_RUNTIME must look like 'module:attribute', not {path!r}")
    runtime = getattr(import_module(module_name), attribute)
    if not isinstance(runtime, Runtime):
        raise TypeError(f"AGENTS_RUNTIME {path!r} is a {type(runtime).__name__}, not a Runtime")
    wire(runtime)
    return runtime


def wire(runtime: Runtime) -> None:
    """Connect a runtime to live updates and background tasks (once per runtime object)."""
    from approvals import live, tasks

    if getattr(runtime, "_countersign_wired", False):
        return
    runtime.add_listener(live.publish)
    runtime.scheduler = tasks.schedule_continuation
    runtime._countersign_wired = True  # type: ignore[attr-defined]
