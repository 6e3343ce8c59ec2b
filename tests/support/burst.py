"""A burst of real HTTP traffic against a Daphne server: logins, page reads and decisions.

Shared by ``tests/live/test_burst.py`` (400 requests, in CI) and ``bench/burst.py`` (2,000). Every
client is a thread with one keep-alive connection and its own cookies, like a browser tab: it loads
the login page, logs in once (the login is reused for every later request), then reads inbox and
overview pages and approves or declines calls through the dashboard's own forms (CSRF token, htmx
header), each decision on a run no other client touches. ``decisions_on_record`` then reads the
database to check that every decision was taken exactly once.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode, urlsplit

from tests.support import server

AGENT = "support"
INBOX = f"/agents/{AGENT}/"
#: Share of each client's requests (after logging in) that are decisions; the rest are page reads.
DECISION_SHARE = 0.4
#: Of the page reads, this share is the overview page; the rest are the agent's inbox.
OVERVIEW_SHARE = 0.2
LOGINS = ((server.USERNAME, server.PASSWORD), (server.OTHER_USERNAME, server.OTHER_PASSWORD))
_CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@dataclass(frozen=True)
class SeededRun:
    run_id: str
    tool_call_id: str


@dataclass(frozen=True)
class Sample:
    kind: str
    status: int  # 0: no HTTP answer (timeout, connection error)
    ms: float
    error: str = ""


@dataclass(frozen=True)
class Decision:
    run: SeededRun
    action: str  # "approve" | "decline"
    username: str
    status: int


@dataclass
class BurstResult:
    clients: int
    seconds: float
    samples: list[Sample]
    decisions: list[Decision]
    #: Requests the clients did not send because the burst ran past its deadline.
    not_sent: int = 0

    @property
    def requests(self) -> int:
        return len(self.samples)

    @property
    def server_errors(self) -> list[Sample]:
        return [s for s in self.samples if s.status >= 500]

    @property
    def failures(self) -> list[Sample]:
        """Every request that did not get the answer it should have (5xx included)."""
        return [s for s in self.samples if s.status not in _EXPECTED[s.kind]]

    def percentiles(self, kind: str | None = None) -> tuple[float, float]:
        """p50 and p95 (nearest rank) in ms, of every request or of one kind."""
        ordered = sorted(s.ms for s in self.samples if kind is None or s.kind == kind)
        if not ordered:
            return 0.0, 0.0
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        return round(statistics.median(ordered), 1), round(p95, 1)

    @property
    def throughput(self) -> float:
        return round(self.requests / self.seconds, 1) if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        p50, p95 = self.percentiles()
        return {
            "requests": self.requests,
            "not_sent": self.not_sent,
            "clients": self.clients,
            "decisions": len(self.decisions),
            "server_errors": len(self.server_errors),
            "failures": len(self.failures),
            "p50_ms": p50,
            "p95_ms": p95,
            "throughput_rps": self.throughput,
            "seconds": round(self.seconds, 1),
            "by_kind": {
                kind: dict(zip(("p50_ms", "p95_ms"), self.percentiles(kind), strict=True))
                for kind in sorted({s.kind for s in self.samples})
            },
        }

    def describe_failures(self, limit: int = 10) -> str:
        shown = [f"{s.kind}: {s.status or s.error} after {s.ms:.0f} ms" for s in self.failures[:limit]]
        return "; ".join(shown) + (" ..." if len(self.failures) > limit else "")


_EXPECTED = {
    "login-page": {200},
    "login": {302},
    "inbox": {200},
    "overview": {200},
    "approve": {200},
    "decline": {200},
}


class Browser:
    """One client: a keep-alive HTTP/1.1 connection and the cookies the server set."""

    def __init__(self, base_url: str, *, timeout: float) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout = timeout
        self.cookies: dict[str, str] = {}
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(
        self, kind: str, method: str, path: str, form: dict[str, str] | None = None, *, htmx: bool = False
    ) -> tuple[Sample, str]:
        headers = {"Host": f"{self.host}:{self.port}"}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            headers["X-CSRFToken"] = self.cookies.get("csrftoken", "")
        if htmx:
            headers["HX-Request"] = "true"
        started = time.perf_counter()
        try:
            status, text = self._send(method, path, body, headers)
        except (OSError, http.client.HTTPException) as error:
            self.close()
            return Sample(kind, 0, _ms(started), f"{type(error).__name__}: {error}"), ""
        return Sample(kind, status, _ms(started)), text

    def _send(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, str]:
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._conn.request(method, path, body=body, headers=headers)
                response = self._conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # The server closed an idle keep-alive connection: open a new one, once.
                self.close()
                if attempt == 2:
                    raise
                continue
            text = response.read().decode("utf-8", "replace")
            for header in response.headers.get_all("Set-Cookie") or []:
                self._remember(header)
            if response.will_close:
                self.close()
            return response.status, text
        raise AssertionError("unreachable")

    def _remember(self, header: str) -> None:
        for name, morsel in SimpleCookie(header).items():
            if morsel["max-age"] == "0" or not morsel.value:
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = morsel.value

    def log_in(self, username: str, password: str) -> list[Sample]:
        page, html = self.request("login-page", "GET", "/accounts/login/")
        match = _CSRF_INPUT.search(html)
        form = {
            "username": username,
            "password": password,
            "next": "/",
            "csrfmiddlewaretoken": match.group(1) if match else "",
        }
        login, _ = self.request("login", "POST", "/accounts/login/", form)
        return [page, login]


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _plan(per_client: int, runs: list[SeededRun], rng: random.Random) -> list[tuple[str, SeededRun | None]]:
    """One client's requests after logging in: reads and decisions (on ``runs``), shuffled."""
    steps: list[tuple[str, SeededRun | None]] = [
        ("approve" if i % 2 == 0 else "decline", run) for i, run in enumerate(runs)
    ]
    reads = per_client - len(steps)
    steps += [("overview" if rng.random() < OVERVIEW_SHARE else "inbox", None) for _ in range(reads)]
    rng.shuffle(steps)
    return steps


def decisions_needed(requests: int, clients: int) -> int:
    """How many runs a burst of ``requests`` by ``clients`` decides (seed that many)."""
    per_client = requests // clients - 2  # two requests to log in
    if per_client < 1:
        raise ValueError(f"{requests} requests are too few for {clients} clients")
    return clients * round(per_client * DECISION_SHARE)


def run_burst(
    base_url: str,
    runs: list[SeededRun],
    *,
    clients: int,
    requests: int,
    timeout: float = 60.0,
    deadline: float | None = None,
    seed: int = 1,
) -> BurstResult:
    """``requests`` requests by ``clients`` concurrent clients (all starting at once).

    With a ``deadline`` (seconds), clients send nothing more once it has passed (a server that hangs
    would otherwise keep a burst going for hours): what was not sent is counted as ``not_sent``.
    """
    per_client = requests // clients - 2
    share = decisions_needed(requests, clients) // clients
    if len(runs) < share * clients:
        raise ValueError(f"{share * clients} seeded runs needed, {len(runs)} given")
    samples: list[Sample] = []
    decisions: list[Decision] = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    stop_at = float("inf") if deadline is None else time.perf_counter() + deadline

    def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        browser = Browser(base_url, timeout=timeout)
        username, password = LOGINS[index % len(LOGINS)]
        mine: list[Sample] = []
        decided: list[Decision] = []
        start.wait()
        try:
            mine += browser.log_in(username, password)
            for kind, run in _plan(per_client, runs[index * share : (index + 1) * share], rng):
                if time.perf_counter() > stop_at:
                    break
                if run is None:
                    sample, _ = browser.request(kind, "GET", INBOX if kind == "inbox" else "/agents/")
                else:
                    form = {"agent": AGENT, "next": INBOX}
                    if kind == "decline":
                        form["reason"] = "Not during the burst"
                    path = f"/runs/{run.run_id}/calls/{run.tool_call_id}/{kind}"
                    sample, _ = browser.request(kind, "POST", path, form, htmx=True)
                    decided.append(Decision(run, kind, username, sample.status))
                mine.append(sample)
        finally:
            browser.close()
            with lock:
                samples.extend(mine)
                decisions.extend(decided)

    threads = [threading.Thread(target=client, args=(i,), name=f"burst-client-{i}") for i in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    return BurstResult(
        clients, seconds, samples, decisions, not_sent=clients * (per_client + 2) - len(samples)
    )


# -- the database side: seeding runs and reading what was decided (through manage.py) -------------

_SEED = """
import json
from asgiref.sync import async_to_sync
from approvals import agents
agent = agents.get({agent!r})
async def seed():
    out = []
    for i in range({count}):
        # A ticket (thread) each: the demo's refunds recheck what is left to refund on an order per
        # ticket, and these are unrelated requests, each decided once.
        result = await agent.generate(f"Refund ${{300 + i % 500}} on A-1042", thread_id=f"burst-{{i}}")
        assert result.status == "suspended", result
        out.append([result.run_id, result.tool_calls[0].tool_call_id])
    return out
print("SEEDED " + json.dumps(async_to_sync(seed)()))
"""

_RECORD = """
import json, sys
from approvals.models import AuditEntry, RunRecord
ids = json.loads(sys.stdin.read())
columns = ("run_id", "tool_call_id", "action", "outcome", "username")
audit = list(AuditEntry.objects.filter(run_id__in=ids).values_list(*columns))
left = list(RunRecord.objects.filter(run_id__in=ids).values_list("run_id", flat=True))
print("RECORD " + json.dumps({{"audit": audit, "left": left}}))
"""


def seed_runs(env: dict[str, str], count: int) -> list[SeededRun]:
    """``count`` suspended runs of the demo ``support`` agent, each waiting on one refund approval."""
    out = server.manage(env, "shell", "-c", _SEED.format(agent=AGENT, count=count), timeout=600)
    line = next(line for line in out.splitlines() if line.startswith("SEEDED "))
    return [SeededRun(run_id, call_id) for run_id, call_id in json.loads(line.removeprefix("SEEDED "))]


def decisions_on_record(env: dict[str, str], decisions: list[Decision]) -> list[str]:
    """What is wrong with the record of ``decisions`` (empty: each was taken exactly once).

    Each decided run must have exactly one audit entry (its decision, with the action and user the
    client sent, that completed the run) and must be gone from the store (it ended).
    """
    import subprocess

    ids = [d.run.run_id for d in decisions]
    done = subprocess.run(
        [server.PYTHON, server.MANAGE, "shell", "-c", _RECORD.format()],
        cwd=server.ROOT,
        env=env,
        input=json.dumps(ids),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise AssertionError(f"reading the record failed:\n{done.stdout}\n{done.stderr}")
    line = next(line for line in done.stdout.splitlines() if line.startswith("RECORD "))
    record = json.loads(line.removeprefix("RECORD "))
    entries: dict[str, list[list[str]]] = {}
    for row in record["audit"]:
        entries.setdefault(row[0], []).append(row)
    problems = [f"run {run_id} is still in the store" for run_id in record["left"]]
    for decision in decisions:
        rows = entries.get(decision.run.run_id, [])
        expected = [decision.run.run_id, decision.run.tool_call_id, decision.action, "completed"]
        if len(rows) != 1 or rows[0][:4] != expected or rows[0][4] != decision.username:
            problems.append(f"run {decision.run.run_id} ({decision.action} by {decision.username}): {rows}")
    return problems


@contextmanager
def served(env: dict[str, str], log_path: Any) -> Iterator[server.Daphne]:
    """One Daphne process on ``env``'s database."""
    daphne = server.Daphne(env, log_path)
    with server.running(daphne):
        yield daphne


@dataclass
class Backend:
    """A database for a burst: its URL and the environment of the processes that use it."""

    name: str
    database_url: str
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.env:
            self.env = server.env_for(self.database_url)
