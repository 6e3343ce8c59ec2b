"""Element ids for runs and tool calls: the one place that makes them DOM- and CSS-selector-safe.

Views, templates (through the ``dom_id`` tag) and live updates all build ids here, so an htmx target
such as ``#run-<id>`` always matches the element the partial rendered. Run ids made only of ASCII
letters, digits, ``-`` and ``_`` stay as they are (``id="run-<run_id>"`` is part of the stable
surface); any other character (``:`` in a sub-agent's call id, ``.``, spaces...) becomes ``_x<hex>_``.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def safe(value: object) -> str:
    """``value`` as a fragment usable in an element id and in an unescaped CSS ``#id`` selector."""
    return _UNSAFE.sub(lambda m: f"_x{ord(m.group()):x}_", str(value))


def dom_id(prefix: str, *parts: object) -> str:
    """``prefix-part1-part2...``, every part made safe: ``dom_id("run", run_id)`` is the run card's id."""
    return "-".join([prefix, *(safe(p) for p in parts)])


def run_card_id(run_id: str) -> str:
    return dom_id("run", run_id)


def call_block_id(run_id: str, tool_call_id: str) -> str:
    return dom_id("call", run_id, tool_call_id)
