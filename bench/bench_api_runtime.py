"""The runtime ``bench/api.py`` serves (``AGENTS_RUNTIME=bench_api_runtime:runtime``): the agents
``list_suspended_runs.py`` seeds runs for, stored in the app's database (``compose`` adds the store)."""

from __future__ import annotations

from list_suspended_runs import AGENTS, _agent

from agents_runtime import Runtime

runtime = Runtime(agents=[_agent(f"agent-{i}") for i in range(AGENTS)])
