"""Benchmark: what the MCP gateway adds to a pass-through tool call.

One run, one client process (the official SDK's ``Client``), two servers: the demo upstream
(``demo/mcp_upstream.py``, its ``read_note`` tool) and ``manage.py mcp_gateway`` in front of it, on a
scratch SQLite database. Each sample is a pair, in alternating order: the same call straight to the
upstream, and through the gateway (``notes.read_note``, a tool that passes through). Per transport:

- ``http``: the upstream serves streamable HTTP; the gateway serves streamable HTTP and reaches the
  upstream at its URL;
- ``stdio``: the client launches the upstream and the gateway as its children; the gateway launches
  its own upstream.

Prints p50 / p95 of each and of the pairs' differences (the overhead) and appends the run to
``bench/results/mcp_gateway.json``.

    .venv/bin/python bench/mcp_gateway.py              # 500 pairs per transport
    .venv/bin/python bench/mcp_gateway.py --n 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import ROOT, p50_p95, scratch_database

RESULTS = ROOT / "bench" / "results" / "mcp_gateway.json"
UPSTREAM = str(ROOT / "demo" / "mcp_upstream.py")
MANAGE = str(ROOT / "manage.py")
WARM_UP = 30
CONFIG = """
[gateway]
agent = "bench-gateway"
http_auth = "none"

[upstreams.notes]
{upstream}
default = "pass"

[upstreams.notes.tools.delete_note]
mode = "approve"
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(port: int, process: subprocess.Popen[bytes]) -> None:
    ends = time.monotonic() + 60
    while time.monotonic() < ends:
        if process.poll() is not None:
            raise SystemExit(f"a server exited at start ({process.args!r})")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"a server did not start ({process.args!r})")


async def _pairs(
    direct: Callable[[], Awaitable[Any]], gateway: Callable[[], Awaitable[Any]], n: int
) -> dict[str, list[float]]:
    for _ in range(WARM_UP):
        await direct()
        await gateway()
    samples: dict[str, list[float]] = {"direct": [], "gateway": [], "overhead": []}
    for i in range(n):
        timed = {}
        for name, call in (("direct", direct), ("gateway", gateway))[:: 1 if i % 2 else -1]:
            started = time.perf_counter()
            result = await call()
            timed[name] = (time.perf_counter() - started) * 1000
            assert not result.is_error, result
        samples["direct"].append(timed["direct"])
        samples["gateway"].append(timed["gateway"])
        samples["overhead"].append(timed["gateway"] - timed["direct"])
    return samples


def _targets(transport: str, env: dict[str, str], config: Path, stack: ExitStack) -> tuple[Any, Any]:
    """What the client connects to, straight and through the gateway (HTTP servers started here)."""
    from mcp import StdioServerParameters

    if transport == "stdio":
        upstream = json.dumps([sys.executable, UPSTREAM])
        config.write_text(CONFIG.format(upstream=f"command = {upstream}"))
        args = [MANAGE, "mcp_gateway", "--config", str(config)]
        return (
            StdioServerParameters(command=sys.executable, args=[UPSTREAM], env=env),
            StdioServerParameters(command=sys.executable, args=args, env=env, cwd=ROOT),
        )
    up_port, gw_port = _free_port(), _free_port()
    config.write_text(CONFIG.format(upstream=f'url = "http://127.0.0.1:{up_port}/mcp"'))
    gateway = [sys.executable, MANAGE, "mcp_gateway", "--config", str(config), "--port", str(gw_port)]
    for port, command in ((up_port, [sys.executable, UPSTREAM, "--http", str(up_port)]), (gw_port, gateway)):
        process = subprocess.Popen(command, env=env)
        stack.callback(process.wait, 15)
        stack.callback(process.terminate)
        _wait_for(port, process)
    return f"http://127.0.0.1:{up_port}/mcp", f"http://127.0.0.1:{gw_port}/mcp"


async def _measure(direct_target: Any, gateway_target: Any, n: int) -> dict[str, list[float]]:
    from mcp import Client

    async with Client(direct_target) as direct, Client(gateway_target) as through:
        return await _pairs(
            lambda: direct.call_tool("read_note", {"title": "welcome"}),
            lambda: through.call_tool("notes.read_note", {"title": "welcome"}),
            n,
        )


def _summary(samples: dict[str, list[float]]) -> dict[str, float]:
    figures: dict[str, float] = {}
    for name, values in samples.items():
        p50, p95 = p50_p95(values)
        figures[f"{name}_p50_ms"], figures[f"{name}_p95_ms"] = p50, p95
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=500, help="pairs per transport")
    options = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    run: dict[str, Any] = {"n": options.n, "transports": {}}
    with scratch_database("sqlite", "mcp_gateway") as database_url, tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "WARNING", "DEBUG": "1"}
        env.pop("REDIS_URL", None)
        subprocess.run([sys.executable, MANAGE, "migrate", "-v", "0"], env=env, check=True, cwd=ROOT)
        for transport in ("http", "stdio"):
            with ExitStack() as stack:
                targets = _targets(transport, env, Path(tmp) / f"{transport}.toml", stack)
                figures = _summary(asyncio.run(_measure(*targets, options.n)))
            run["transports"][transport] = figures
            print(
                f"{transport:5}  "
                + "  ".join(
                    f"{name} p50 {figures[f'{name}_p50_ms']:.2f} ms p95 {figures[f'{name}_p95_ms']:.2f} ms"
                    for name in ("direct", "gateway", "overhead")
                )
            )
    run["load_average"] = list(os.getloadavg())
    run["measured_at"] = datetime.now(UTC).replace(microsecond=0).isoformat()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    earlier = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    RESULTS.write_text(json.dumps([*earlier, run], indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
