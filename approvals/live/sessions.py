"""``SessionWatch``: one periodic re-check of the sessions of every open page, per server process.

A logout closes its session's sockets at once (``live.end_session``). A session that ends otherwise
(deleted, expired, its user deactivated or their password changed) and a change to which agents a
user may see (or to the groups whose escalated calls they hear of) are found by this re-check, every
``LIVE_SESSION_CHECK_SECONDS``. Pages register their session on accept and leave on disconnect; one
task per event loop checks every distinct session among them in one batch (the sessions in one
query, their users in one, their groups in one), so a period costs the same few queries whether a
process holds ten sockets or thousands.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Protocol, TypeGuard

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.contrib.auth import backends as auth_backends
from django.contrib.auth.models import Group
from django.contrib.sessions.backends import cached_db as cached_db_sessions
from django.contrib.sessions.backends import db as db_sessions
from django.contrib.sessions.backends.base import SessionBase
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from approvals import policy
from approvals.policy import escalations_heard, visible_agent_ids

logger = logging.getLogger(__name__)

#: Session keys (and users) per ``IN (...)`` query.
CHUNK = 500


class Watcher(Protocol):
    """An open page (a consumer) whose session ``SessionWatch`` re-checks."""

    async def session_checked(self, login: Login | None) -> None:
        """What its session logs in now; ``None`` once it no longer logs that user in."""
        ...


@dataclass(frozen=True)
class Login:
    """Whom a session still logs in, the agents they may see, and the groups whose escalated calls
    they hear of beyond those (``escalations_heard``)."""

    user_pk: Any
    agent_ids: tuple[str, ...]
    escalations: tuple[str, ...] = ()


class SessionWatch:
    """Re-checks the sessions of this process's open pages every ``LIVE_SESSION_CHECK_SECONDS``.

    One task per event loop (like ``Fanout``), running while a page is registered: it sleeps a
    period (the first one anywhere in the first period, so processes started together do not check
    in step), checks every distinct session of its pages at once (``check_sessions``), and tells each
    page what its session logs in now. A check that fails is logged and tried again next period.
    """

    #: Pages told per turn of the event loop (as ``Fanout.BATCH``).
    BATCH = 50

    def __init__(self) -> None:
        self._watches: dict[asyncio.AbstractEventLoop, _LoopWatch] = {}

    def _watch(self) -> _LoopWatch:
        loop = asyncio.get_running_loop()
        watch = self._watches.get(loop)
        if watch is None:
            self._watches = {lp: w for lp, w in self._watches.items() if not lp.is_closed()}
            watch = self._watches[loop] = _LoopWatch(self)
        return watch

    def add(self, watcher: Watcher, session_key: str, user_pk: Any) -> None:
        """Re-check ``session_key`` for ``watcher`` (a page its user ``user_pk`` opened)."""
        self._watch().add(watcher, session_key, user_pk)

    def discard(self, watcher: Watcher) -> None:
        self._watch().discard(watcher)


class _LoopWatch:
    """``SessionWatch`` in one event loop."""

    def __init__(self, watch: SessionWatch) -> None:
        self.watch = watch
        self.watchers: dict[Watcher, tuple[str, Any]] = {}
        self.task: asyncio.Task[None] | None = None

    def add(self, watcher: Watcher, session_key: str, user_pk: Any) -> None:
        self.watchers[watcher] = (session_key, user_pk)
        if (self.task is None or self.task.done()) and float(settings.LIVE_SESSION_CHECK_SECONDS) > 0:
            # A fresh context: the task outlives the consumer that started it.
            self.task = asyncio.get_running_loop().create_task(
                self._run(), name="countersign-live-session-watch", context=contextvars.Context()
            )

    def discard(self, watcher: Watcher) -> None:
        self.watchers.pop(watcher, None)
        if not self.watchers and self.task is not None:
            # Stopped until the next page registers. Not cancelled when this is the task itself (a
            # page it signed out leaving): it is telling that page, and ends once it is done.
            task, self.task = self.task, None
            if task is not asyncio.current_task():
                task.cancel()

    async def _run(self) -> None:
        this = asyncio.current_task()
        first = True
        while self.task is this:
            interval = float(settings.LIVE_SESSION_CHECK_SECONDS)
            if interval <= 0:  # re-checks switched off
                return
            # The first check anywhere in the first period: processes started together (a deploy)
            # do not check in step; the next ones 80 to 100% of a period apart.
            await asyncio.sleep(interval * random.uniform(0.05 if first else 0.8, 1.0))
            first = False
            watchers = list(self.watchers.items())
            try:
                logins = await database_sync_to_async(check_sessions)({key for _, (key, _) in watchers})
            except Exception:
                logger.exception("Live sessions: the re-check failed; trying again next period")
                continue
            for index, (watcher, (key, user_pk)) in enumerate(watchers, start=1):
                if watcher not in self.watchers:
                    continue  # closed while the check ran
                login = logins.get(key)
                still = login if login is not None and login.user_pk == user_pk else None
                try:
                    await watcher.session_checked(still)
                except Exception:
                    logger.exception("Live sessions: telling %r about its session failed", watcher)
                if index % self.watch.BATCH == 0:
                    await asyncio.sleep(0)


# -- the check ------------------------------------------------------------------------------------


def check_sessions(session_keys: Collection[str]) -> dict[str, Login]:
    """Whom each session still logs in; a session missing from the answer logs nobody in.

    The checks of ``django.contrib.auth.get_user`` for a request on that session: the session exists
    and has not expired, names a configured backend and a user it still returns (active), and its
    auth hash matches the user's password (or a ``SECRET_KEY_FALLBACKS`` one). Unlike a request it
    writes nothing: a session found out is left for the browser's next request to flush, and one
    signed with a fallback secret to have its key cycled.
    """
    sessions = _session_data(session_keys)
    wanted: dict[str, list[tuple[str, Any]]] = {}  # backend path -> (session key, user pk)
    users_model = get_user_model()
    for key, data in sessions.items():
        backend_path = data.get(BACKEND_SESSION_KEY)
        if SESSION_KEY not in data or backend_path not in settings.AUTHENTICATION_BACKENDS:
            continue
        try:
            user_pk = users_model._meta.pk.to_python(data[SESSION_KEY])
        except Exception:  # not a key of this user model: logs nobody in, like get_user's KeyError
            continue
        wanted.setdefault(backend_path, []).append((key, user_pk))
    users: dict[tuple[str, Any], Any] = {}
    for backend_path, pairs in wanted.items():
        for user_pk, user in _users(backend_path, {pk for _, pk in pairs}).items():
            users[backend_path, user_pk] = user
    groups = _group_names(u for u in users.values() if not getattr(u, "is_superuser", False))
    seen: dict[tuple[str, Any], Login] = {}
    logins: dict[str, Login] = {}
    for backend_path, pairs in wanted.items():
        for key, user_pk in pairs:
            user = users.get((backend_path, user_pk))
            session_hash = sessions[key].get(HASH_SESSION_KEY)
            if user is None or not user.is_active or not _hash_holds(user, session_hash):
                continue
            if (backend_path, user_pk) not in seen:
                seen[backend_path, user_pk] = login_of(user, groups.get(user.pk, frozenset()))
            logins[key] = seen[backend_path, user_pk]
    return logins


def login_of(user: Any, groups: frozenset[str] | None = None) -> Login:
    """What ``user`` is let see and hear live (``groups``: their group names, if read already), as a
    socket opens and at each re-check."""
    agent_ids = visible_agent_ids(user, groups)
    return Login(user.pk, tuple(agent_ids), escalations_heard(user, agent_ids, groups))


def _session_store() -> type[SessionBase]:
    store: type[SessionBase] = import_module(settings.SESSION_ENGINE).SessionStore
    return store


def _session_data(session_keys: Collection[str]) -> dict[str, dict[str, Any]]:
    """The data of each live session among ``session_keys`` (decoded), by key."""
    store = _session_store()
    found: dict[str, dict[str, Any]] = {}
    if _reads_like_the_database_engine(store):
        # What its load() reads, for every key at once.
        model = store.get_model_class()
        decoder = store()
        for chunk in _chunks(sorted(session_keys)):
            rows = model.objects.filter(session_key__in=chunk, expire_date__gt=timezone.now())
            for key, encoded in rows.values_list("session_key", "session_data"):
                found[key] = decoder.decode(encoded)
        return found
    # Any other engine (cache, signed cookies, ...): its own load(), once per session.
    for key in session_keys:
        data = store(key).load()
        if data:
            found[key] = data
    return found


def _reads_like_the_database_engine(
    store: type[SessionBase],
) -> TypeGuard[type[db_sessions.SessionStore]]:
    """Django's database engine, or a subclass that reads sessions the same way (another model, or
    its own read of the same rows that says so: ``reads_as_the_database_engine``, as the desk's)."""
    if not issubclass(store, db_sessions.SessionStore):
        return False
    # (Django's cached_db keeps every session in the database as well: that is the record.)
    base = cached_db_sessions.SessionStore if issubclass(store, cached_db_sessions.SessionStore) else None
    own = store.__mro__[: store.__mro__.index(base or db_sessions.SessionStore)]
    return not any(
        name in vars(cls)
        for cls in own
        if not vars(cls).get("reads_as_the_database_engine")
        for name in ("load", "_get_session_from_db")
    )


def _users(backend_path: str, user_pks: set[Any]) -> dict[Any, Any]:
    """The users ``backend_path`` returns for ``user_pks`` (as its ``get_user``), by primary key."""
    backend = load_backend(backend_path)
    if not hasattr(backend, "get_user"):
        return {}
    if isinstance(backend, auth_backends.ModelBackend) and type(backend).get_user in (
        auth_backends.ModelBackend.get_user,
        policy.ModelBackend.get_user,  # (Django's, with the rights read beside: the same users)
    ):
        # ModelBackend.get_user for all of them in one query.
        found = get_user_model()._default_manager.in_bulk(list(user_pks))
        return {pk: user for pk, user in found.items() if backend.user_can_authenticate(user)}
    users = {pk: backend.get_user(pk) for pk in user_pks}
    return {pk: user for pk, user in users.items() if user is not None}


def _group_names(users: Iterable[Any]) -> dict[Any, frozenset[str]]:
    """Each user's group names (what ``visible_agent_ids`` reads), in one query for all of them."""
    names: dict[Any, set[str]] = {}
    for chunk in _chunks(sorted({user.pk for user in users})):
        for user_pk, name in Group.objects.filter(user__pk__in=chunk).values_list("user__pk", "name"):
            names.setdefault(user_pk, set()).add(name)
    return {pk: frozenset(group_names) for pk, group_names in names.items()}


def _hash_holds(user: Any, session_hash: Any) -> bool:
    """Whether the session's auth hash still verifies ``user`` (``auth.get_user``'s check)."""
    if not hasattr(user, "get_session_auth_hash"):
        return True
    if not session_hash:
        return False
    if constant_time_compare(session_hash, user.get_session_auth_hash()):
        return True
    return any(constant_time_compare(session_hash, h) for h in user.get_session_auth_fallback_hash())


def _chunks(items: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


session_watch = SessionWatch()
