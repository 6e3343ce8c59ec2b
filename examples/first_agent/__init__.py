"""Your first agent (docs/agents.md): serve it with ``AGENTS_RUNTIME=examples.first_agent:runtime``."""

from .agent import ask_cost_centre, pay_invoice, payables, runtime

__all__ = ["ask_cost_centre", "pay_invoice", "payables", "runtime"]
