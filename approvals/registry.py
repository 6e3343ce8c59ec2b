"""Which runtime (and so which agents) the dashboard serves: the ``AGENTS_RUNTIME`` setting."""

from __future__ import annotations

from functools import cache
from importlib import import_module

from django.conf import settings

from agents_runtime import Runtime


@cache
def get_runtime() -> Runtime:
    """Import the ``module:attribute`` named by ``settings.AGENTS_RUNTIME`` once per process."""
    path: str = settings.AGENTS_RUNTIME
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"AGENTS_RUNTIME must look like 'module:attribute', not {path!r}")
    runtime = getattr(import_module(module_name), attribute)
    if not isinstance(runtime, Runtime):
        raise TypeError(f"AGENTS_RUNTIME {path!r} is a {type(runtime).__name__}, not a Runtime")
    return runtime
