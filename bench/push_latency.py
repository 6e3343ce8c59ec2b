"""Benchmark: from a suspension's commit to its event on N open websockets (live updates).

Set-ups (each with a fresh database; fresh Daphne processes for every client count):

- ``single``: one Daphne, the embedded default: SQLite, in-process channel layer. The suspension is
  made in another process, so its event travels through the ``LiveEvent`` outbox and the relay that
  polls it in the server process.
- ``redis-N`` (``--instances N``; ``redis-2`` by default): N Daphne instances on one PostgreSQL
  database (a dedicated one, dropped at the end; SQLite when PostgreSQL does not answer) with the
  Redis channel layer; clients split evenly across them; the suspension is made in another process
  and sent through Redis.

The clients are minimal websocket clients (non-blocking sockets in one epoll loop per process, no
asyncio; authenticated with a session cookie of the demo login) in ``--client-processes`` processes
of their own (default: one per 1,250 sockets), each holding a share of the sockets on every server;
they get their commands on stdin and answer on stdout. The suspensions come from a child process
running the demo ``support`` agent. A listener registered ahead of the live publisher stamps
``time.monotonic()`` right after the store committed the suspension; each client stamps the frame's
arrival (CLOCK_MONOTONIC is one clock for every process on the machine). Latency = arrival - commit,
for every client and sample.

Besides latency, per client count: each server's resident memory (VmRSS) before and after its
sockets connected, as MiB per 1,000 sockets; the database queries each server process made on the
way of an event to its sockets (``approvals.live.querycount``, switched on by the environment
variable this bench sets), per event, and its other queries per second (connects, the sockets'
session re-checks, the expiry sweep); CPU per event of each server process and of all the client
processes together (the clients must not be the bottleneck). The open-files limit is raised to the
hard limit first (servers and clients inherit it).

Prints a table and writes ``bench/results/push_latency.json`` as a list of
``{setup, clients, p50_ms, p95_ms, ...}``. Targets: p95 <= 250 ms at 500 clients, <= 500 ms beyond.

    .venv/bin/python bench/push_latency.py                    # both set-ups, 1 / 100 / 500 clients
    .venv/bin/python bench/push_latency.py --setups single --clients 500 --samples 10
    .venv/bin/python bench/push_latency.py --clients 1000,2000,5000 --instances 2
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import random
import resource
import select
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import server  # noqa: E402  (process helpers shared with the live tests)

RESULTS = ROOT / "bench" / "results" / "push_latency.json"
PROMPT = "Refund $300 on A-1042"
DEFAULT_POSTGRES = "postgres://root@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/12"
#: ``approvals.live.querycount``'s switch: the directory its counts are written to.
QUERY_COUNTS_VARIABLE = "COUNTERSIGN_QUERY_COUNTS"
#: Sockets per client process when ``--client-processes`` is not given.
CLIENTS_PER_PROCESS = 1250
#: Sockets each client process opens at once (each connect reads the session and the user's agents).
CONNECT_BATCH = 25


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


# --- The clients: minimal websocket clients (RFC 6455, enough for JSON text frames) --------------


def handshake(port: int, session: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        "GET /ws/live/ HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Origin: http://127.0.0.1:{port}\r\n"
        f"Cookie: sessionid={session}\r\n\r\n"
    ).encode()


def frames(buffer: bytearray) -> Iterator[tuple[int, bytes]]:
    """The complete frames at the start of ``buffer`` (taken out of it): (opcode, payload)."""
    while len(buffer) >= 2:
        length, start = buffer[1] & 0x7F, 2
        if length == 126:
            if len(buffer) < 4:
                return
            length, start = int.from_bytes(buffer[2:4]), 4
        elif length == 127:
            if len(buffer) < 10:
                return
            length, start = int.from_bytes(buffer[2:10]), 10
        if len(buffer) < start + length:
            return
        opcode, payload = buffer[0] & 0x0F, bytes(buffer[start : start + length])
        del buffer[: start + length]
        yield opcode, payload


def masked_frame(opcode: int, payload: bytes) -> bytes:
    mask = os.urandom(4)  # control frames only: payload < 126
    return (
        bytes([0x80 | opcode, 0x80 | len(payload)])
        + mask
        + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    )


STDIN = 0


class Connection:
    def __init__(self, port: int, session: str) -> None:
        self.port = port
        self.request = handshake(port, session)
        self.sock = socket.socket()
        self.sock.setblocking(False)
        self.sock.connect_ex(("127.0.0.1", port))
        self.buffer = bytearray()
        self.upgraded = False
        self.ready = False


class ClientProcess:
    """``--client-process``: holds its share of the sockets in one epoll loop (no asyncio: a frame
    costs a recv and a few microseconds of Python, so thousands of sockets are stamped close to when
    their frames came). Commands on stdin, one answer each on stdout:

    ``connect`` {targets: [[port, count], ...], session}; ``await`` {run_id, t0, within}: the latency
    of every socket of this process (ms from t0, the commit), once all have it or ``within`` passed;
    ``cpu``: this process's CPU seconds so far (user + system).
    """

    def __init__(self) -> None:
        self.poll = select.epoll()
        self.connections: dict[int, Connection] = {}
        self.open = 0
        self.arrivals: dict[str, list[float]] = {}
        self.lines = bytearray()

    def _add(self, port: int, session: str) -> None:
        connection = Connection(port, session)
        self.connections[connection.sock.fileno()] = connection
        self.poll.register(connection.sock.fileno(), select.EPOLLOUT)

    def _io(self, timeout: float) -> None:
        """Serve the sockets for at most ``timeout`` s (and take what stdin has)."""
        for fd, mask in self.poll.poll(timeout):
            now = time.monotonic()  # every frame of this read came at once
            if fd == STDIN:
                self.lines += os.read(fd, 65536) or b"\n"  # at its end: an empty line, "stop"
                continue
            connection = self.connections[fd]
            if mask & select.EPOLLOUT and not connection.upgraded:
                connection.sock.sendall(connection.request)
                self.poll.modify(fd, select.EPOLLIN)
                continue
            data = connection.sock.recv(262144)
            if not data:
                raise ConnectionError(f"a socket to {connection.port} closed")
            self._feed(connection, data, now)

    def _feed(self, connection: Connection, data: bytes, now: float) -> None:
        buffer = connection.buffer
        buffer += data
        if not connection.upgraded:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            if not buffer.startswith(b"HTTP/1.1 101"):
                raise RuntimeError(f"websocket handshake refused: {bytes(buffer[:200])!r}")
            connection.upgraded = True
            del buffer[: end + 4]
        for opcode, payload in frames(buffer):
            if opcode == 0x1:
                if b'"run-suspended"' in payload:
                    run_id = json.loads(payload)["event"]["run_id"]
                    self.arrivals.setdefault(run_id, []).append(now)
                elif not connection.ready and b'"hello"' in payload:
                    connection.ready = True
                    self.open += 1
            elif opcode == 0x9:
                connection.sock.sendall(masked_frame(0xA, payload))
            elif opcode == 0x8:
                raise ConnectionError(f"a socket to {connection.port} was closed by the server")

    def connect(self, targets: list[list[int]], session: str) -> dict[str, Any]:
        pending = [port for port, count in targets for _ in range(count)]
        total = self.open + len(pending)
        deadline = time.monotonic() + 600
        while self.open < total:
            while pending and len(self.connections) - self.open < CONNECT_BATCH:
                self._add(pending.pop(), session)
            if time.monotonic() > deadline:
                raise TimeoutError("connecting took over 600 s")
            self._io(1.0)
        return {"connected": self.open}

    def wait(self, run_id: str, t0: float, within: float) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while len(self.arrivals.get(run_id, ())) < self.open and (left := deadline - time.monotonic()) > 0:
            self._io(left)
        got = self.arrivals.pop(run_id, [])
        return {"latencies": [round((a - t0) * 1000, 2) for a in got], "missed": self.open - len(got)}

    def serve(self) -> None:
        self.poll.register(STDIN, select.EPOLLIN)
        while True:
            end = self.lines.find(b"\n")
            if end < 0:
                self._io(3600)
                continue
            line = bytes(self.lines[:end])
            del self.lines[: end + 1]
            if not line.strip():
                break
            command = json.loads(line)
            op = command.pop("op")
            if op == "connect":
                answer = self.connect(**command)
            elif op == "await":
                answer = self.wait(**command)
            else:
                times = os.times()
                answer = {"cpu": times.user + times.system}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
        for connection in self.connections.values():
            connection.sock.close()


class Clients:
    """The bench's side of ``K`` client processes; sockets dealt out round-robin over the servers."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.processes: list[asyncio.subprocess.Process] = []

    async def start(self) -> None:
        for _ in range(self.count):
            self.processes.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    __file__,
                    "--client-process",
                    cwd=ROOT,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    limit=2**24,
                )
            )

    async def _ask(self, process: asyncio.subprocess.Process, command: dict[str, Any]) -> dict[str, Any]:
        assert process.stdin and process.stdout
        process.stdin.write(json.dumps(command).encode() + b"\n")
        await process.stdin.drain()
        line = await asyncio.wait_for(process.stdout.readline(), timeout=600)
        if not line:
            raise RuntimeError("a client process died")
        return dict(json.loads(line))

    async def ask_all(self, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pairs = zip(self.processes, commands, strict=True)
        return list(await asyncio.gather(*(self._ask(p, c) for p, c in pairs)))

    async def connect(self, ports: list[int], clients: int, session: str) -> int:
        shares: list[dict[int, int]] = [{} for _ in self.processes]
        for i in range(clients):
            share = shares[i % len(shares)]
            port = ports[i % len(ports)]
            share[port] = share.get(port, 0) + 1
        commands = [{"op": "connect", "targets": list(s.items()), "session": session} for s in shares]
        return sum(a["connected"] for a in await self.ask_all(commands))

    async def cpu(self) -> float:
        return sum(float(a["cpu"]) for a in await self.ask_all([{"op": "cpu"}] * len(self.processes)))

    async def stop(self) -> None:
        for process in self.processes:
            if process.stdin is not None:
                process.stdin.close()
        for process in self.processes:
            await process.wait()


# --- Measuring -----------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def rss_mib(pid: int) -> float:
    """The process's resident memory (VmRSS), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process (/proc/<pid>/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def query_counts(directory: Path, pids: list[int]) -> list[dict[str, float]]:
    """What ``approvals.live.querycount`` last wrote for each server process."""
    await asyncio.sleep(0.5)  # it writes every 0.1 s
    counts = []
    for pid in pids:
        data = json.loads((directory / f"{pid}.json").read_text())
        counts.append({"fanout": data["fanout"], "other": data["other"], "at": data["at"]})
    return counts


@dataclass
class Servers:
    daphnes: list[server.Daphne]
    counts_dir: Path

    @property
    def pids(self) -> list[int]:
        return [d.popen.pid for d in self.daphnes if d.popen is not None]

    @property
    def ports(self) -> list[int]:
        return [d.port for d in self.daphnes]


async def warm_up(ports: list[int], session: str) -> None:
    """One socket per server, opened and closed: first-connect imports are not counted as sockets."""
    for port in ports:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            sock.sendall(handshake(port, session))
            received = b""
            while b'"hello"' not in received:
                chunk = sock.recv(65536)
                assert chunk, f"the warm-up socket to {port} closed"
                received += chunk
    await asyncio.sleep(1.0)


async def measure(
    servers: Servers,
    suspender: Suspender,
    clients: int,
    samples: int,
    client_processes: int,
    *,
    settle: float = 0.0,
    verbose: bool = False,
) -> dict[str, Any]:
    load = os.getloadavg()[0]  # other work on the machine shares its CPUs with this bench
    session = (await suspender.ask("session"))["session"]
    await warm_up(servers.ports, session)
    rss_before = [rss_mib(pid) for pid in servers.pids]
    pool = Clients(client_processes)
    await pool.start()
    try:
        began = time.monotonic()
        connected = await pool.connect(servers.ports, clients, session)
        connect_seconds = time.monotonic() - began
        assert connected == clients, (connected, clients)
        await asyncio.sleep(2.0)
        rss_after = [rss_mib(pid) for pid in servers.pids]
        # The sockets' periodic session re-checks (LIVE_SESSION_CHECK_SECONDS, 60 s) start one period
        # after they connected: sampling sooner would measure a server spared its steady work.
        await asyncio.sleep(max(0.0, settle - 2.0))
        queries_before = await query_counts(servers.counts_dir, servers.pids)
        server_cpu_before = [cpu_seconds(pid) for pid in servers.pids]
        client_cpu_before = await pool.cpu()
        window = time.monotonic()
        latencies: list[float] = []
        missed = 0
        for _ in range(samples):
            made = await suspender.ask("suspend")
            command = {"op": "await", "run_id": made["run_id"], "t0": made["t0"], "within": 10}
            answers = await pool.ask_all([command] * client_processes)
            got = sorted(x for a in answers for x in a["latencies"])
            missed += sum(a["missed"] for a in answers)
            if verbose and got:
                print(f"    run {made['run_id']}: first client {got[0]:.1f} ms, last {got[-1]:.1f} ms")
            latencies.extend(got)
            # Let the burst settle, and land at a different point of the relay's polling cycle each time.
            await asyncio.sleep(0.2 + random.random() * 0.1)
        window = time.monotonic() - window
        client_cpu = await pool.cpu() - client_cpu_before
        server_cpu = [cpu_seconds(pid) - b for pid, b in zip(servers.pids, server_cpu_before, strict=True)]
        queries_after = await query_counts(servers.counts_dir, servers.pids)
    finally:
        await pool.stop()
    per_process = clients / len(servers.pids)
    fanout_queries = [a["fanout"] - b["fanout"] for a, b in zip(queries_after, queries_before, strict=True)]
    other_rates = [
        (a["other"] - b["other"]) / (a["at"] - b["at"])
        for a, b in zip(queries_after, queries_before, strict=True)
    ]
    rss = zip(rss_before, rss_after, strict=True)
    growth = [(after - before) / per_process * 1000 for before, after in rss]
    return {
        "load_1m": round(load, 2),
        "p50_ms": round(percentile(latencies, 50), 1),
        "p95_ms": round(percentile(latencies, 95), 1),
        "max_ms": round(max(latencies), 1),
        "mean_ms": round(statistics.fmean(latencies), 1),
        "received": len(latencies),
        "missed": missed,
        "instances": len(servers.pids),
        "client_processes": client_processes,
        "connect_s": round(connect_seconds, 1),
        "rss_mib_before": [round(r, 1) for r in rss_before],
        "rss_mib_after": [round(r, 1) for r in rss_after],
        "rss_mib_per_1000": round(statistics.fmean(growth), 1),
        "queries_per_event_per_process": round(sum(fanout_queries) / samples / len(servers.pids), 2),
        "other_queries_per_s_per_process": round(statistics.fmean(other_rates), 1),
        "server_cpu_ms_per_event_per_process": round(sum(server_cpu) / samples / len(server_cpu) * 1000, 1),
        "client_cpu_ms_per_event": round(client_cpu / samples * 1000, 1),
        "window_s": round(window, 1),
        "server_cpu_share": round(sum(server_cpu) / window, 2),
        "client_cpu_share": round(client_cpu / window, 2),
    }


def _postgres_database(stack: ExitStack, logs: Path) -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    url = url if url.startswith(("postgres://", "postgresql://")) else DEFAULT_POSTGRES
    try:
        return stack.enter_context(server.postgres_database(url))
    except Exception as error:  # any failure means: no PostgreSQL here
        print(f"  PostgreSQL unavailable ({error}); the Redis set-up uses SQLite", flush=True)
        return None


def instances_of(setup: str) -> int:
    return 1 if setup == "single" else int(setup.split("-", 1)[1])


def client_processes_for(clients: int, asked: int) -> int:
    """``--client-processes``, or one per ``CLIENTS_PER_PROCESS`` sockets (at least one)."""
    return asked or max(1, math.ceil(clients / CLIENTS_PER_PROCESS))


async def run_setup(setup: str, args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    with ExitStack() as stack:
        if setup == "single":
            env = server.env_for(f"sqlite:///{workdir / 'single.sqlite3'}")
        else:
            redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS
            database = _postgres_database(stack, workdir) or f"sqlite:///{workdir / 'redis.sqlite3'}"
            env = server.env_for(database, redis_url=redis_url)
        server.prepare_database(env)
        counts_dir = workdir / f"{setup}-queries"
        counts_dir.mkdir(exist_ok=True)
        suspender = Suspender(env)
        await suspender.start()
        records = []
        try:
            for clients in args.clients:
                # Fresh servers for every count: their memory before and after the sockets connect.
                daphnes = [
                    server.Daphne(
                        {**env, QUERY_COUNTS_VARIABLE: str(counts_dir)},
                        workdir / f"{setup}-{clients}-daphne-{i}.log",
                    )
                    for i in range(instances_of(setup))
                ]
                with server.running(*daphnes):
                    processes = client_processes_for(clients, args.client_processes)
                    figures = await measure(
                        Servers(daphnes, counts_dir),
                        suspender,
                        clients,
                        args.samples,
                        processes,
                        settle=args.settle,
                        verbose=args.verbose,
                    )
                print(
                    f"{setup:>8} {clients:>7} {figures['p50_ms']:>7} {figures['p95_ms']:>7} "
                    f"{figures['max_ms']:>7} {figures['missed']:>6} {figures['rss_mib_per_1000']:>9} "
                    f"{figures['queries_per_event_per_process']:>6} "
                    f"{figures['other_queries_per_s_per_process']:>7} "
                    f"{figures['server_cpu_ms_per_event_per_process']:>8} "
                    f"{figures['client_cpu_ms_per_event']:>8} {processes:>3} {figures['load_1m']:>5}",
                    flush=True,
                )
                if args.verbose:
                    print(f"    {json.dumps(figures)}", flush=True)
                records.append({"setup": setup, "clients": clients, "settle_s": args.settle, **figures})
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


def raise_open_files_limit() -> int:
    """The soft limit on open files up to the hard one (the servers and clients inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


#: What a record keeps, besides its set-up and client count (the printed table has a few more).
KEEP = (
    "p50_ms",
    "p95_ms",
    "max_ms",
    "missed",
    "instances",
    "client_processes",
    "rss_mib_per_1000",
    "rss_mib_after",
    "queries_per_event_per_process",
    "other_queries_per_s_per_process",
    "server_cpu_ms_per_event_per_process",
    "client_cpu_ms_per_event",
    "load_1m",
    "settle_s",
)


async def main(args: argparse.Namespace) -> None:
    limit = raise_open_files_limit()
    needed = max(args.clients) + 200
    if limit < needed:
        raise SystemExit(f"open files limit {limit} < {needed}: raise it (ulimit -n)")
    load = os.getloadavg()[0]
    print(f"load average (1 min) at start: {load:.2f}; open files limit {limit}")
    print(
        f"{'setup':>8} {'clients':>7} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'missed':>6} "
        f"{'MiB/1000':>9} {'q/ev':>6} {'other/s':>7} {'srv ms/ev':>8} {'cli ms/ev':>8} {'cp':>3} {'load':>5}"
    )
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="push-latency-", delete=not args.keep_logs) as tmp:
        if args.keep_logs:
            print(f"logs in {tmp}")
        for setup in args.setups:
            if setup != "single" and not _redis_answers(os.environ.get("REDIS_URL") or DEFAULT_REDIS):
                print(f"  {setup} skipped: Redis does not answer (set REDIS_URL)", flush=True)
                continue
            records += await run_setup(setup, args, Path(tmp))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    # A partial run (--setups / --clients) replaces only the figures it measured.
    measured = {(r["setup"], r["clients"]) for r in records}
    earlier = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    saved = [r for r in earlier if (r["setup"], r["clients"]) not in measured]
    saved += [{"setup": r["setup"], "clients": r["clients"], **{k: r[k] for k in KEEP}} for r in records]
    saved.sort(key=lambda r: (instances_of(r["setup"]), r["setup"], r["clients"]))
    RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    for r in records:
        target = 500 if r["clients"] > 500 else 250
        if r["clients"] >= 500 and r["p95_ms"] > target:
            print(
                f"MISSED TARGET: {r['setup']} at {r['clients']} clients: p95 {r['p95_ms']} ms > {target} ms"
            )


def client_counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setups", nargs="+", help="single, redis-2, redis-N (default: single redis-2)")
    parser.add_argument("--instances", type=int, help="N Daphne processes on Redis: the set-up redis-N")
    parser.add_argument(
        "--clients", nargs="+", type=client_counts, default=[[1, 100, 500]], help="e.g. 1000,2000,5000"
    )
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument(
        "--client-processes",
        type=int,
        default=0,
        help=f"processes holding the sockets (default: one per {CLIENTS_PER_PROCESS} sockets)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=60.0,
        help="seconds between the sockets connecting and the samples (their session re-checks begin)",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs (path printed)")
    parser.add_argument("--verbose", action="store_true", help="print first and last arrival of every sample")
    args = parser.parse_args(argv)
    args.clients = [count for counts in args.clients for count in counts]
    if args.setups is None:
        args.setups = [f"redis-{args.instances}"] if args.instances else ["single", "redis-2"]
    elif args.instances:
        args.setups = [f"redis-{args.instances}" if s.startswith("redis") else s for s in args.setups]
    for setup in args.setups:
        if setup != "single" and not (setup.startswith("redis-") and setup[6:].isdigit()):
            parser.error(f"unknown set-up {setup!r}")
    return args


if __name__ == "__main__":
    if "--suspender" in sys.argv:
        suspender()
    elif "--client-process" in sys.argv:
        ClientProcess().serve()
    else:
        asyncio.run(main(parse(sys.argv[1:])))
