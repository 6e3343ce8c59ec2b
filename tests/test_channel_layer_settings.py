"""The channel layer's settings: REDIS_URL's servers, or masters found through Sentinel, or none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from channels_redis.core import RedisChannelLayer
from django.core.exceptions import ImproperlyConfigured
from redis.asyncio.sentinel import SentinelConnectionPool

from config.channel_layers import channel_layers, redis_hosts
from tests.support import zygote

VARIABLES = ("REDIS_URL", "REDIS_SENTINELS", "REDIS_SENTINEL_MASTER", "REDIS_SENTINEL_PASSWORD")


def test_no_redis_is_the_in_process_layer() -> None:
    assert channel_layers("") == {
        "default": {"BACKEND": "approvals.server.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 5000}}
    }


def test_one_url_is_one_server_with_no_socket_timeout() -> None:
    assert channel_layers("redis://127.0.0.1:6379/0") == {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": "redis://127.0.0.1:6379/0", "socket_timeout": None}],
                "capacity": 5000,
            },
        }
    }


def test_several_urls_are_one_server_each_in_their_order() -> None:
    urls = ["redis://a:6379/0", "rediss://:secret@b:6380/2", "unix:///run/redis.sock?db=1"]

    for spelled in (",".join(urls), " , ".join(urls), "\n".join(urls), f" {urls[0]}  {urls[1]},{urls[2]}, "):
        assert redis_hosts(spelled) == [{"address": url, "socket_timeout": None} for url in urls]


def test_a_url_that_is_not_redis_is_refused_without_showing_its_password() -> None:
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL") as refused:
        redis_hosts("redis://a:6379/0,http://user:hunter2@b:6379/0")
    assert "hunter2" not in str(refused.value)


def test_sentinels_find_the_named_master_with_the_urls_database_and_login() -> None:
    hosts = redis_hosts(
        "redis://app:p%40ss@ignored:6379/3",
        sentinels="10.0.0.1:26379, 10.0.0.2:26380,sentinel-3",
        sentinel_master="countersign",
        sentinel_password="watchers",
    )

    assert hosts == [
        {
            "sentinels": [("10.0.0.1", 26379), ("10.0.0.2", 26380), ("sentinel-3", 26379)],
            "master_name": "countersign",
            "socket_timeout": None,
            "db": 3,
            "username": "app",
            "password": "p@ss",
            "sentinel_kwargs": {"password": "watchers"},
        }
    ]


def test_sentinels_without_redis_url_use_database_0_and_no_password() -> None:
    hosts = redis_hosts("", sentinels="[::1]:26379,[fd00::2]", sentinel_master="countersign")

    assert hosts == [
        {
            "sentinels": [("::1", 26379), ("fd00::2", 26379)],
            "master_name": "countersign",
            "socket_timeout": None,
        }
    ]
    assert channel_layers("", sentinels="[::1]:26379", sentinel_master="countersign")["default"][
        "BACKEND"
    ] == ("channels_redis.core.RedisChannelLayer")


def test_several_masters_are_shards_watched_by_the_same_sentinels() -> None:
    hosts = redis_hosts("redis:///1", sentinels="s1:26379", sentinel_master="shard-a,shard-b")

    assert [h["master_name"] for h in hosts] == ["shard-a", "shard-b"]
    assert {(tuple(h["sentinels"]), h["db"]) for h in hosts} == {((("s1", 26379),), 1)}


def test_channels_redis_takes_the_entries_as_they_are() -> None:
    # The pools channels_redis makes of them (no connection is opened until a command is sent).
    config = channel_layers(
        "redis://:secret@ignored/4",
        sentinels="127.0.0.1:26379",
        sentinel_master="shard-a,shard-b",
        sentinel_password="watchers",
    )["default"]["CONFIG"]
    layer = RedisChannelLayer(**config)
    pools = [layer.create_pool(index) for index in range(layer.ring_size)]

    assert [type(pool) for pool in pools] == [SentinelConnectionPool, SentinelConnectionPool]
    assert [pool.service_name for pool in pools] == ["shard-a", "shard-b"]
    kwargs = pools[0].connection_kwargs
    assert (kwargs["db"], kwargs["password"], kwargs["socket_timeout"]) == (4, "secret", None)
    assert pools[0].sentinel_manager.sentinels[0].connection_pool.connection_kwargs["password"] == "watchers"

    plain = RedisChannelLayer(
        **channel_layers("redis://127.0.0.1:6379/0,redis://127.0.0.1:6380/1")["default"]["CONFIG"]
    )
    assert [plain.create_pool(i).connection_kwargs["port"] for i in range(plain.ring_size)] == [6379, 6380]
    assert [plain.create_pool(i).connection_kwargs["socket_timeout"] for i in range(2)] == [None, None]


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"sentinels": "s1:26379"}, "REDIS_SENTINEL_MASTER must name the master"),
        ({"sentinel_master": "countersign"}, "REDIS_SENTINELS is not"),
        (
            {"redis_url": "redis://a/0,redis://b/0", "sentinels": "s1", "sentinel_master": "m"},
            "one URL at most",
        ),
        ({"redis_url": "rediss://a/0", "sentinels": "s1", "sentinel_master": "m"}, "no TLS"),
        ({"redis_url": "redis://a/zero", "sentinels": "s1", "sentinel_master": "m"}, "must be a number"),
        ({"sentinels": "s1:port", "sentinel_master": "m"}, "is not host:port"),
        ({"redis_url": "localhost:6379"}, "is not a redis://"),
    ],
)
def test_what_cannot_work_is_refused_at_start(values: dict[str, str], complaint: str) -> None:
    url = values.pop("redis_url", "")
    with pytest.raises(ImproperlyConfigured, match=complaint):
        redis_hosts(url, **values)


def _layers_from_environment(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    code = "import json; from config import settings; print(json.dumps(settings.CHANNEL_LAYERS))"
    return zygote.zygote.run([sys.executable, "-c", code], env={**clean, **env})


def _layers(**env: str) -> dict[str, Any]:
    done = _layers_from_environment(**env)
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_settings_read_the_variables() -> None:
    assert _layers()["default"]["BACKEND"] == "approvals.server.layers.InMemoryChannelLayer"
    assert _layers(REDIS_URL="redis://a:6379/0")["default"]["CONFIG"]["hosts"] == [
        {"address": "redis://a:6379/0", "socket_timeout": None}
    ]
    assert [
        h["address"] for h in _layers(REDIS_URL="redis://a/0, redis://b/0")["default"]["CONFIG"]["hosts"]
    ] == [
        "redis://a/0",
        "redis://b/0",
    ]
    [master] = _layers(
        REDIS_URL="redis://:secret@ignored/2",
        REDIS_SENTINELS="s1:26379,s2:26379",
        REDIS_SENTINEL_MASTER="countersign",
        REDIS_SENTINEL_PASSWORD="watchers",
    )["default"]["CONFIG"]["hosts"]
    assert master == {
        "sentinels": [["s1", 26379], ["s2", 26379]],  # (JSON makes the tuples lists)
        "master_name": "countersign",
        "socket_timeout": None,
        "db": 2,
        "password": "secret",
        "sentinel_kwargs": {"password": "watchers"},
    }


def test_settings_refuse_sentinels_without_a_master_name() -> None:
    done = _layers_from_environment(REDIS_SENTINELS="s1:26379")
    assert done.returncode != 0
    assert "ImproperlyConfigured: REDIS_SENTINELS is set: REDIS_SENTINEL_MASTER must name" in done.stderr
