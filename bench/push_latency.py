"""Benchmark: from a suspension's commit to its event on N open websockets (live updates).

Set-ups (each with fresh Daphne processes and a fresh database):

- ``single``: one Daphne, the embedded default: SQLite, in-process channel layer. The suspension is
  made in another process, so its event travels through the ``LiveEvent`` outbox and the relay that
  polls it in the server process.
- ``redis-2``: two Daphne instances on one PostgreSQL database (a dedicated one, dropped at the end;
  SQLite when PostgreSQL does not answer) with the Redis channel layer; clients split evenly across
  both; the suspension is made in a third process and sent through Redis.

The clients are minimal websocket clients on asyncio streams (one process, authenticated with a
session cookie of the demo login); the suspensions come from a child process running the demo
``support`` agent. A listener registered ahead of the live publisher stamps ``time.monotonic()`` right
after the store committed the suspension; each client stamps the frame's arrival (CLOCK_MONOTONIC is
one clock for every process on the machine). Latency = arrival - commit, for every client and sample.

Prints a table and writes ``bench/results/push_latency.json`` as a list of
``{setup, clients, p50_ms, p95_ms}``. Target: p95 <= 250 ms at 500 clients.

    .venv/bin/python bench/push_latency.py                    # both set-ups, 1 / 100 / 500 clients
    .venv/bin/python bench/push_latency.py --setups single --clients 500 --samples 10
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import statistics
import struct
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.live import server  # noqa: E402  (process helpers shared with the live tests)

RESULTS = ROOT / "bench" / "results" / "push_latency.json"
PROMPT = "Refund $300 on A-1042"
DEFAULT_POSTGRES = "postgres://root@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/12"


# --- The suspender: a child process that makes suspensions and says when each one committed --------


def suspender() -> None:
    import django

    from agents_runtime import RunEvent
    from demo.agents import runtime

    committed: dict[str, float] = {}

    def stamp(event: RunEvent) -> None:
        if event.type == "run-suspended":
            committed[event.run_id] = time.monotonic()

    # Ahead of the live publisher, which the app adds when django.setup() composes the runtime.
    runtime.add_listener(stamp)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from asgiref.sync import async_to_sync
    from django.contrib.auth import get_user_model
    from django.test import Client

    from approvals import agents

    agent = agents.get("support")

    for line in sys.stdin:
        command = line.strip()
        if command == "session":
            client = Client()
            client.force_login(get_user_model().objects.get(username=server.USERNAME))
            print(json.dumps({"session": client.cookies["sessionid"].value}), flush=True)
        elif command == "suspend":
            result = async_to_sync(agent.generate)(PROMPT)
            assert result.status == "suspended", result
            print(json.dumps({"run_id": result.run_id, "t0": committed.pop(result.run_id)}), flush=True)


class Suspender:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--suspender",
            cwd=ROOT,
            env=self.env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )

    async def ask(self, command: str) -> dict[str, Any]:
        assert self.process and self.process.stdin and self.process.stdout
        self.process.stdin.write(command.encode() + b"\n")
        await self.process.stdin.drain()
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout=60)
        if not line:
            raise RuntimeError("the suspender process died")
        return dict(json.loads(line))

    async def stop(self) -> None:
        if self.process and self.process.stdin:
            self.process.stdin.close()
            await self.process.wait()


# --- A minimal websocket client (RFC 6455, enough for receiving JSON text frames) -----------------


class Client:
    def __init__(self, port: int, session: str) -> None:
        self.port = port
        self.session = session
        self.arrivals: dict[str, float] = {}
        self.waiters: dict[str, asyncio.Future[None]] = {}
        self.ready = asyncio.get_running_loop().create_future()
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer = writer
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                "GET /ws/live/ HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{self.port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"Origin: http://127.0.0.1:{self.port}\r\n"
                f"Cookie: sessionid={self.session}\r\n\r\n"
            ).encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"websocket handshake refused: {head[:200]!r}")
        self.task = asyncio.create_task(self._read(reader))
        await asyncio.wait_for(self.ready, timeout=60)

    def _send(self, opcode: int, payload: bytes) -> None:
        assert self.writer is not None
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        header = bytes([0x80 | opcode, 0x80 | len(payload)])  # control frames: payload < 126
        self.writer.write(header + mask + masked)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                b1, b2 = await reader.readexactly(2)
                length = b2 & 0x7F
                if length == 126:
                    (length,) = struct.unpack("!H", await reader.readexactly(2))
                elif length == 127:
                    (length,) = struct.unpack("!Q", await reader.readexactly(8))
                payload = await reader.readexactly(length)
                arrived = time.monotonic()
                opcode = b1 & 0x0F
                if opcode == 0x9:
                    self._send(0xA, payload)
                elif opcode == 0x8:
                    return
                elif opcode == 0x1:
                    self._received(json.loads(payload), arrived)
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    def _received(self, message: dict[str, Any], arrived: float) -> None:
        if message.get("type") == "hello" and not self.ready.done():
            self.ready.set_result(None)
        elif message.get("type") == "event" and message["event"]["type"] == "run-suspended":
            run_id = message["event"]["run_id"]
            self.arrivals[run_id] = arrived
            waiter = self.waiters.pop(run_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def wait_for(self, run_id: str, within: float) -> float | None:
        if run_id not in self.arrivals:
            waiter = self.waiters.setdefault(run_id, asyncio.get_running_loop().create_future())
            try:
                await asyncio.wait_for(waiter, within)
            except TimeoutError:
                return None
        return self.arrivals.pop(run_id)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.task is not None:
            self.task.cancel()


# --- Measuring -----------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


async def measure(
    ports: list[int], suspender: Suspender, clients: int, samples: int, *, verbose: bool = False
) -> dict[str, Any]:
    session = (await suspender.ask("session"))["session"]
    open_clients: list[Client] = []
    try:
        # Connect in batches: every connect reads the session and the user's agents from the database.
        for start in range(0, clients, 50):
            batch = [Client(ports[i % len(ports)], session) for i in range(start, min(clients, start + 50))]
            await asyncio.gather(*(c.connect() for c in batch))
            open_clients.extend(batch)
        await asyncio.sleep(0.5)
        latencies: list[float] = []
        missed = 0
        for _ in range(samples):
            made = await suspender.ask("suspend")
            arrivals = await asyncio.gather(*(c.wait_for(made["run_id"], within=10) for c in open_clients))
            missed += sum(1 for a in arrivals if a is None)
            got = sorted(a for a in arrivals if a is not None)
            if verbose and got:
                first, last = (got[0] - made["t0"]) * 1000, (got[-1] - made["t0"]) * 1000
                print(
                    f"    run {made['run_id']}: first client {first:.1f} ms, last {last:.1f} ms", flush=True
                )
            latencies.extend((a - made["t0"]) * 1000 for a in arrivals if a is not None)
            # Let the burst settle, and land at a different point of the relay's polling cycle each time.
            await asyncio.sleep(0.2 + random.random() * 0.1)
    finally:
        await asyncio.gather(*(c.close() for c in open_clients))
    return {
        "p50_ms": round(percentile(latencies, 50), 1),
        "p95_ms": round(percentile(latencies, 95), 1),
        "max_ms": round(max(latencies), 1),
        "mean_ms": round(statistics.fmean(latencies), 1),
        "received": len(latencies),
        "missed": missed,
    }


def _postgres_database(stack: ExitStack, logs: Path) -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    url = url if url.startswith(("postgres://", "postgresql://")) else DEFAULT_POSTGRES
    try:
        return stack.enter_context(server.postgres_database(url))
    except Exception as error:  # any failure means: no PostgreSQL here
        print(f"  PostgreSQL unavailable ({error}); the redis-2 set-up uses SQLite", flush=True)
        return None


async def run_setup(
    setup: str, client_counts: list[int], samples: int, workdir: Path, *, verbose: bool = False
) -> list[dict[str, Any]]:
    with ExitStack() as stack:
        if setup == "single":
            env = server.env_for(f"sqlite:///{workdir / 'single.sqlite3'}")
            instances = 1
        else:
            redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS
            database = _postgres_database(stack, workdir) or f"sqlite:///{workdir / 'redis.sqlite3'}"
            env = server.env_for(database, redis_url=redis_url)
            instances = 2
        server.prepare_database(env)
        daphnes = [server.Daphne(env, workdir / f"{setup}-daphne-{i}.log") for i in range(instances)]
        stack.enter_context(server.running(*daphnes))
        suspender = Suspender(env)
        await suspender.start()
        records = []
        try:
            for clients in client_counts:
                figures = await measure(
                    [d.port for d in daphnes], suspender, clients, samples, verbose=verbose
                )
                print(
                    f"{setup:>8} {clients:>7} {figures['p50_ms']:>8} {figures['p95_ms']:>8} "
                    f"{figures['max_ms']:>8} {figures['received']:>9} {figures['missed']:>6}",
                    flush=True,
                )
                records.append({"setup": setup, "clients": clients, **figures})
        finally:
            await suspender.stop()
        return records


def _redis_answers(url: str) -> bool:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


async def main(args: argparse.Namespace) -> None:
    print(
        f"{'setup':>8} {'clients':>7} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'received':>9} {'missed':>6}"
    )
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="push-latency-", delete=not args.keep_logs) as tmp:
        if args.keep_logs:
            print(f"logs in {tmp}")
        for setup in args.setups:
            if setup == "redis-2" and not _redis_answers(os.environ.get("REDIS_URL") or DEFAULT_REDIS):
                print("  redis-2 skipped: Redis does not answer (set REDIS_URL)", flush=True)
                continue
            records += await run_setup(setup, args.clients, args.samples, Path(tmp), verbose=args.verbose)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    keep = ("setup", "clients", "p50_ms", "p95_ms")
    # A partial run (--setups / --clients) replaces only the figures it measured.
    measured = {(r["setup"], r["clients"]) for r in records}
    earlier = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    saved = [r for r in earlier if (r["setup"], r["clients"]) not in measured]
    saved += [{k: r[k] for k in keep} for r in records]
    saved.sort(key=lambda r: (["single", "redis-2"].index(r["setup"]), r["clients"]))
    RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    worst = [r for r in records if r["clients"] >= 500 and r["p95_ms"] > 250]
    for r in worst:
        print(f"MISSED TARGET: {r['setup']} at {r['clients']} clients: p95 {r['p95_ms']} ms > 250 ms")


if __name__ == "__main__":
    if "--suspender" in sys.argv:
        suspender()
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setups", nargs="+", choices=["single", "redis-2"], default=["single", "redis-2"])
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 100, 500])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs (path printed)")
    parser.add_argument("--verbose", action="store_true", help="print first and last arrival of every sample")
    parsed = parser.parse_args()
    asyncio.run(main(parsed))
