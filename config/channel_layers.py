"""``CHANNEL_LAYERS`` from the Redis variables (``REDIS_URL``, ``REDIS_SENTINELS``...), read by settings.

- No Redis: the in-process layer (the embedded single-process run).
- ``REDIS_URL`` with one URL: channels_redis on that server.
- ``REDIS_URL`` with several URLs (separated by commas or whitespace): channels_redis on all of them.
  It shards by consistent hashing: each group lives on the server its name hashes to, and each
  process's channel on the server its ``<prefix>.<process id>!`` part hashes to. Every process
  must list the same servers in the same order.
- ``REDIS_SENTINELS`` (``host:port`` of each Sentinel) with ``REDIS_SENTINEL_MASTER``: the master
  those Sentinels name, found again after a failover. Several master names shard as several URLs
  do. ``REDIS_URL`` then gives at most the database number and the master's login (its host and
  port are not used); ``REDIS_SENTINEL_PASSWORD`` is the Sentinels' own.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

SCHEMES = frozenset({"redis", "rediss", "unix"})
SENTINEL_PORT = 26379


def channel_layers(
    redis_url: str, *, sentinels: str = "", sentinel_master: str = "", sentinel_password: str = ""
) -> dict[str, Any]:
    """The ``CHANNEL_LAYERS`` setting for these values of the variables (blank: unset)."""
    hosts = redis_hosts(
        redis_url, sentinels=sentinels, sentinel_master=sentinel_master, sentinel_password=sentinel_password
    )
    if not hosts:
        # Reaches consumers in this process only: fine for the embedded single-process run (events from
        # other processes, e.g. `manage.py run_agent`, come through the outbox: see approvals/live).
        # Channels' own class, minus its O(N²) fan-out (see approvals/server/layers.py).
        return {
            "default": {
                "BACKEND": "approvals.server.layers.InMemoryChannelLayer",
                "CONFIG": {"capacity": 5000},
            }
        }
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": hosts,
                # One channel per server process carries every live event (approvals.live.Fanout):
                # room for bursts (e.g. many runs seeded at once) rather than Channels' 100.
                "capacity": 5000,
            },
        }
    }


def redis_hosts(
    redis_url: str, *, sentinels: str = "", sentinel_master: str = "", sentinel_password: str = ""
) -> list[dict[str, Any]]:
    """channels_redis's ``hosts``: one entry per Redis server (or Sentinel-watched master); [] for none."""
    urls = _items(redis_url)
    for url in urls:
        if urlsplit(url).scheme not in SCHEMES:
            raise ImproperlyConfigured(
                f"REDIS_URL: {_without_login(url)!r} is not a redis://, rediss:// or unix:// URL"
            )
    if not sentinels.strip():
        if sentinel_master.strip():
            raise ImproperlyConfigured("REDIS_SENTINEL_MASTER is set but REDIS_SENTINELS is not")
        # redis-py 8 defaults socket_timeout to 5 s, which kills the layer's idle blocking reads.
        return [{"address": url, "socket_timeout": None} for url in urls]
    return _sentinel_hosts(urls, _items(sentinels), _items(sentinel_master), sentinel_password.strip())


def _sentinel_hosts(
    urls: list[str], sentinels: list[str], masters: list[str], password: str
) -> list[dict[str, Any]]:
    if not masters:
        raise ImproperlyConfigured(
            "REDIS_SENTINELS is set: REDIS_SENTINEL_MASTER must name the master the Sentinels watch"
        )
    if len(urls) > 1:
        raise ImproperlyConfigured(
            "With REDIS_SENTINELS, REDIS_URL gives only the database and the master's login: one URL "
            "at most (list several masters in REDIS_SENTINEL_MASTER to shard)"
        )
    master: dict[str, Any] = {"socket_timeout": None}
    if urls:
        parts = urlsplit(urls[0])
        if parts.scheme != "redis":
            raise ImproperlyConfigured("With REDIS_SENTINELS, REDIS_URL must be a redis:// URL (no TLS)")
        database = parts.path.strip("/") or "0"
        if not database.isdigit():
            raise ImproperlyConfigured(f"REDIS_URL: the database must be a number, not {database!r}")
        master["db"] = int(database)
        if parts.username:
            master["username"] = unquote(parts.username)
        if parts.password:
            master["password"] = unquote(parts.password)
    if password:
        # Only that: the Sentinels' connections otherwise keep redis-py's defaults (a 5 s socket
        # timeout suits their short queries, unlike the master's blocking reads).
        master["sentinel_kwargs"] = {"password": password}
    addresses = [_sentinel_address(item) for item in sentinels]
    return [{"sentinels": addresses, "master_name": name, **master} for name in masters]


def _sentinel_address(item: str) -> tuple[str, int]:
    host, colon, port = item.rpartition(":")
    if not colon or "]" in port:  # no port, or a bare IPv6 address in brackets
        host, port = item, str(SENTINEL_PORT)
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit():
        raise ImproperlyConfigured(f"REDIS_SENTINELS: {item!r} is not host:port")
    return host, int(port)


def _items(value: str) -> list[str]:
    return [item for item in re.split(r"[\s,]+", value) if item]


def _without_login(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl() if "@" in parts.netloc else url
