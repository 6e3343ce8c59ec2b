"""Live updates over several Redis servers (``REDIS_URL`` lists them) and through Sentinel, for real.

The shards are the suite's Redis (``REDIS_URL``'s server, database ``REDIS_DB``, which no other test
uses) and a ``redis-server`` this module starts on a free port; the Sentinel is ``redis-server
--sentinel``, also started here. The pages are the app's live sockets in this process; the events
come from another process whose settings build its layer from the same variables.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import redis.sentinel
from channels.layers import get_channel_layer
from django.contrib.auth.models import User
from django.test import AsyncClient, Client

from approvals.live import agent_group
from approvals.live.fanout import fanout
from config.channel_layers import channel_layers
from tests.support import server, services
from tests.support.live_sockets import Session, is_event, messages_until
from tests.support.runtime_fixtures import DashboardAgents

# Its tests share Redis database REDIS_DB (they flush it): one pytest-xdist worker runs them all.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.xdist_group("redis-db-13")]

#: Not the suite's default Redis database, nor one another test uses: nothing else mixes its keys in.
REDIS_DB = 13
MASTER = "countersign-test"
#: channels_redis's key of a group's members (its default prefix).
GROUP_KEY = "asgi:group:{}"


@contextmanager
def _redis_server(directory: Path, *args: str) -> Iterator[int]:
    """A throwaway ``redis-server`` (or Sentinel, by ``args``) on a free port, stopped afterwards."""
    binary = services.require_redis_server()
    port = server.free_port()
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / "redis.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [binary, *args, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        client = redis.Redis(port=port, socket_timeout=2)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"redis-server did not start:\n{log_path.read_text()}") from None
                time.sleep(0.05)
        client.close()
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _plain_server(directory: Path) -> AbstractContextManager[int]:
    return _redis_server(directory, "--save", "", "--appendonly", "no")


@dataclass
class Shards:
    #: What ``REDIS_URL`` says: the suite's Redis first, then the server started here.
    redis_url: str
    #: A client of each shard, in that order.
    clients: list[redis.Redis]


@pytest.fixture
def shards(tmp_path: Path) -> Iterator[Shards]:
    first = urlunsplit(urlsplit(services.require_redis())._replace(path=f"/{REDIS_DB}"))
    with _plain_server(tmp_path / "second") as port:
        second = f"redis://127.0.0.1:{port}/0"
        clients = [redis.Redis.from_url(first), redis.Redis.from_url(second)]
        for client in clients:
            client.flushdb()
        try:
            yield Shards(f"{first},{second}", clients)
        finally:
            for client in clients:
                client.flushdb()
                client.close()


def _announce_elsewhere(env: dict[str, str], events: list[dict[str, str]]) -> subprocess.Popen[bytes]:
    """Another process announcing ``events`` through its own channel layer, built by settings."""
    code = f"from approvals import live\nfor event in {events!r}:\n    live.announce(event)\n"
    return subprocess.Popen(
        [sys.executable, server.MANAGE, "shell", "-c", code],
        cwd=server.ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


async def _finished(process: subprocess.Popen[bytes]) -> None:
    output, _ = await asyncio.to_thread(process.communicate, timeout=120)
    assert process.returncode == 0, output.decode(errors="replace")


def _marker(agent_id: str, n: int) -> dict[str, str]:
    return {"type": "test-marker", "agent_id": agent_id, "run_id": f"{agent_id}-{n}"}


@pytest.mark.slow
@pytest.mark.redis
async def test_events_from_another_process_reach_the_pages_whichever_server_holds_their_group(
    shards: Shards, agents: DashboardAgents, reviewer: User, settings: Any, tmp_path: Path
) -> None:
    settings.CHANNEL_LAYERS = channel_layers(shards.redis_url)
    layer = get_channel_layer()
    # The two agents' groups hash to different servers, so both carry live traffic here.
    where = {agent: layer.consistent_hash(agent_group(agent)) for agent in ("helpdesk", "boss")}
    assert sorted(where.values()) == [0, 1], where

    session = await Session.of(reviewer)
    pages = [await session.socket() for _ in range(2)]

    # This process's one membership of each group is on the group's server, and only there.
    members = set()
    for agent, index in where.items():
        key = GROUP_KEY.format(agent_group(agent))
        members |= set(shards.clients[index].zrange(key, 0, -1))
        assert shards.clients[index].zcard(key) == 1
        assert not shards.clients[1 - index].exists(key)
    # Both groups hold the same channel, read on one server: one agent's events are looked up on the
    # other server and written to this one.
    [channel] = members
    read_on = layer.consistent_hash(layer.non_local_name(channel.decode()))
    assert len([agent for agent, index in where.items() if index != read_on]) == 1

    # Another server process, configured by the same REDIS_URL, announces events on both agents.
    env = server.env_for(f"sqlite:///{tmp_path / 'unused.sqlite3'}", redis_url=shards.redis_url)
    sent = [_marker(agent, n) for n in range(3) for agent in ("helpdesk", "boss")]
    await _finished(_announce_elsewhere(env, sent))

    for page in pages:
        # (A generous wait: three pytest workers share two cores on CI.)
        seen = await messages_until(page, is_event("test-marker", "boss-2"), wait=45)
        got = [m["event"]["run_id"] for m in seen if is_event("test-marker")(m)]
        assert sorted(got) == sorted(e["run_id"] for e in sent)
    for page in pages:
        await page.disconnect()


@pytest.mark.redis
def test_readyz_round_trips_over_several_servers(shards: Shards, settings: Any, client: Client) -> None:
    settings.CHANNEL_LAYERS = channel_layers(shards.redis_url)
    # Generous: the test is about where the probe's messages go, not how fast (three pytest workers
    # share two cores on CI).
    settings.READYZ_TIMEOUT_SECONDS = 5
    # Ten probes, each through a group of its own, which its name puts on one server or the other.
    # (Sent to the probe's channel directly, about half were lost: channels_redis wrote each to the
    # server the channel's whole name hashes to and read the one its process part hashes to.)
    for _ in range(10):
        response = client.get("/readyz")
        assert response.status_code == 200, response.content
    # Each probe left its group.
    assert [shard.keys("asgi:group:readyz.*") for shard in shards.clients] == [[], []]


@pytest.mark.redis
async def test_readyz_answers_while_the_pages_of_this_process_wait_for_events(
    agents: DashboardAgents, reviewer: User, settings: Any
) -> None:
    # One server: the fan-out waiting on the layer for this process's pages held up a probe that read
    # a channel of its own until the next live event came.
    settings.CHANNEL_LAYERS = channel_layers(
        urlunsplit(urlsplit(services.require_redis())._replace(path=f"/{REDIS_DB}"))
    )
    settings.READYZ_TIMEOUT_SECONDS = 2
    page = await (await Session.of(reviewer)).socket()

    for _ in range(3):
        # On this event loop, as the probe runs on the server's.
        response = await AsyncClient().get("/readyz")
        assert response.status_code == 200, response.content
    await page.disconnect()


@dataclass
class Watched:
    """A master, its replica and one Sentinel watching them (ports)."""

    master: int
    replica: int
    sentinel: int

    def master_named(self) -> int | None:
        """The master's port as clients learn it from the Sentinel; None while it names none."""
        watcher = redis.sentinel.Sentinel([("127.0.0.1", self.sentinel)], socket_timeout=2)
        try:
            host, port = watcher.discover_master(MASTER)
        except redis.sentinel.MasterNotFoundError:
            return None
        finally:
            for connection in watcher.sentinels:
                connection.close()
        assert host == "127.0.0.1"
        return int(port)


@pytest.fixture(autouse=True)
def _connections_collected_here() -> Iterator[None]:
    """The layers these tests build talk to servers the tests stop (one of them by a crash): their
    connections are let go and collected at this test's end, not in whichever test runs next (where
    an unclosed socket's ResourceWarning would fail that test). Torn down last: after the settings
    are restored and this test's event loop has closed."""
    yield
    fanout.forget_closed_loops()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _until(condition: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        time.sleep(0.1)


def _replica_known(watched: Watched) -> bool:
    with redis.Redis(port=watched.sentinel, socket_timeout=2, decode_responses=True) as watcher:
        replicas = watcher.sentinel_slaves(MASTER)
    return any(r.get("master-link-status") == "ok" for r in replicas)


def _crash(port: int) -> None:
    with redis.Redis(port=port) as doomed:
        os.kill(int(doomed.info("server")["process_id"]), signal.SIGKILL)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[Watched]:
    with (
        _plain_server(tmp_path / "master") as master,
        _redis_server(
            tmp_path / "replica", "--save", "", "--appendonly", "no", "--replicaof", "127.0.0.1", str(master)
        ) as replica,
    ):
        conf = tmp_path / "sentinel" / "sentinel.conf"
        conf.parent.mkdir()
        # Sentinel rewrites its file as it learns: one of its own.
        conf.write_text(
            f"sentinel monitor {MASTER} 127.0.0.1 {master} 1\n"
            f"sentinel down-after-milliseconds {MASTER} 1000\n"
            f"sentinel failover-timeout {MASTER} 10000\n"
        )
        with _redis_server(conf.parent, str(conf), "--sentinel") as sentinel_port:
            found = Watched(master, replica, sentinel_port)
            assert found.master_named() == master
            _until(lambda: _replica_known(found), "the Sentinel knows the replica")
            yield found


#: Set for the pytest of its own that the failover test runs in (see the test below).
_IN_OWN_PROCESS = "COUNTERSIGN_SENTINEL_FAILOVER_HERE"


@pytest.mark.slow
def test_live_updates_reach_the_pages_through_sentinel_and_after_a_failover(tmp_path: Path) -> None:
    """The failover, in a pytest process of its own: the master it crashes leaves connections behind
    (channels_redis never closes a Sentinel pool's own clients, nor can it cleanly close those to a
    killed master), and their unclosed-socket warnings, raised whenever the collector meets them,
    failed some later test of this suite instead."""
    services.require_redis_server()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {_IN_OWN_PROCESS: "1", "DATABASE_URL": f"sqlite:///{tmp_path / 'failover.sqlite3'}"}
    test = f"{Path(__file__).relative_to(server.ROOT)}::test_sentinel_failover_in_this_process"
    done = subprocess.run(
        # (Unraisable exceptions not turned into failures there: those are the leaks this isolates.)
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:unraisableexception",
            test,
        ],
        cwd=server.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.skipif(
    not os.environ.get(_IN_OWN_PROCESS), reason="run by the test above, in a process of its own"
)
async def test_sentinel_failover_in_this_process(
    watched: Watched, agents: DashboardAgents, reviewer: User, settings: Any, tmp_path: Path
) -> None:
    variables = {"REDIS_SENTINELS": f"127.0.0.1:{watched.sentinel}", "REDIS_SENTINEL_MASTER": MASTER}
    settings.CHANNEL_LAYERS = channel_layers(
        "redis:///2",
        sentinels=variables["REDIS_SENTINELS"],
        sentinel_master=variables["REDIS_SENTINEL_MASTER"],
    )
    env = {
        **server.env_for(f"sqlite:///{tmp_path / 'unused.sqlite3'}", redis_url="redis:///2"),
        **variables,
    }
    session = await Session.of(reviewer)
    page = await session.socket()
    # The memberships are on the master the Sentinel named, in REDIS_URL's database.
    with redis.Redis(port=watched.master, db=2) as master:
        assert master.zcard(GROUP_KEY.format(agent_group("helpdesk"))) == 1

    await _finished(_announce_elsewhere(env, [_marker("helpdesk", 1)]))
    await messages_until(page, is_event("test-marker", "helpdesk-1"))
    # On this event loop, as the probe runs on the server's.
    response = await AsyncClient().get("/readyz")
    assert response.status_code == 200, response.content
    await page.disconnect()

    # The master crashes and the Sentinel promotes the replica. (A socket whose own receive meets the
    # outage is closed by it, and the browser opens another.) This process's fan-out retries until the
    # Sentinel names the new master; a new page and another process find it there.
    await asyncio.to_thread(_crash, watched.master)
    await asyncio.to_thread(_until, lambda: watched.master_named() == watched.replica, "the failover")
    page = await session.socket()
    await _finished(_announce_elsewhere(env, [_marker("helpdesk", 2)]))
    await messages_until(page, is_event("test-marker", "helpdesk-2"))
    response = await AsyncClient().get("/readyz")
    assert response.status_code == 200, response.content
    with redis.Redis(port=watched.replica, db=2) as promoted:
        assert promoted.zcard(GROUP_KEY.format(agent_group("helpdesk"))) == 1
    await page.disconnect()
