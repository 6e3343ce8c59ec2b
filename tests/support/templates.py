"""Databases for the processes tests start, copied from a template instead of migrated each time.

Many tests give their processes (Daphne, ``manage.py``, workers) a database of their own, migrated,
often with the demo login and a second reviewer: ~30 migrations and a few commands, several seconds
of CPU each time. Here that work is done once per *recipe* into a template, with the real commands
(``manage.py migrate`` and the recipe's own), and every test gets a copy: a file copy on SQLite,
``CREATE DATABASE ... TEMPLATE`` on PostgreSQL.

A template is keyed by the recipe, the database server and what the commands' output depends on
(``AGENTS_RUNTIME``: ``post_migrate`` makes a group per agent; ``AGENTS_MODEL``; the settings module).
SQLite templates are files that every pytest process of the run shares (``share_directory``: the
pytest-xdist workers' common base directory, which pytest removes with its old runs): the first
process that needs one builds it under a file lock, the others wait for it and copy it. PostgreSQL
templates live as long as the pytest process that made them: ``drop_all()`` (a session fixture)
removes them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.support.zygote import manage

#: The variables the template's contents depend on, besides the database's kind and server.
KEYED_BY = ("AGENTS_RUNTIME", "AGENTS_MODEL", "DJANGO_SETTINGS_MODULE", "PYTHONPATH")
#: Left out of the environment a template is built with: which channel layer and task backend a
#: test's processes use has nothing to do with migrating or seeding (and must not be a shared one).
NOT_FOR_BUILDING = ("REDIS_URL", "TASKS_BACKEND")

Recipe = Callable[[dict[str, str]], None]

_lock = threading.RLock()  # a recipe may clone from another template
_templates: dict[tuple[str, ...], str] = {}
_directory: tempfile.TemporaryDirectory[str] | None = None
#: Where SQLite templates go when the run's pytest processes share them (``share_directory``).
_shared: Path | None = None


def share_directory(directory: Path) -> None:
    """Keep SQLite templates in ``directory``, shared with the run's other pytest processes."""
    global _shared
    directory.mkdir(parents=True, exist_ok=True)
    _shared = directory


def run(env: Mapping[str, str], *args: str, timeout: float = 300) -> str:
    """``manage.py ARGS`` with ``env`` (in a process of its own); its stdout. Raises when it fails."""
    done = manage(list(args), env, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(
            f"manage.py {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def _migrate(env: dict[str, str]) -> None:
    run(env, "migrate", "--noinput", "--verbosity", "0")


def migrated(database_url: str, env: Mapping[str, str]) -> None:
    """Make the (new, empty) database at ``database_url`` what ``manage.py migrate`` makes of it."""
    clone(database_url, env, "migrated", _migrate)


def clone(database_url: str, env: Mapping[str, str], recipe_name: str, recipe: Recipe) -> None:
    """Make the new, empty database at ``database_url`` what ``recipe(env)`` makes of an empty one.

    ``recipe`` runs once per key, on a template database, with ``env`` pointing at it.
    """
    parts = urlsplit(database_url)
    sqlite = parts.scheme == "sqlite"
    key = (recipe_name, parts.scheme, "" if sqlite else parts.netloc, *(env.get(k, "") for k in KEYED_BY))
    with _lock:
        template = _templates.get(key)
        if template is None:
            template = _build(key, parts.scheme, database_url, env, recipe)
            _templates[key] = template
    if sqlite:
        _copy_sqlite(template, parts.path)
    else:
        _copy_postgres(template, database_url)


def _build(key: tuple[str, ...], scheme: str, like_url: str, env: Mapping[str, str], recipe: Recipe) -> str:
    global _directory
    building = {k: v for k, v in env.items() if k not in NOT_FOR_BUILDING}
    if scheme == "sqlite":
        if _shared is not None:
            return _build_shared_sqlite(key, building, recipe)
        if _directory is None:
            _directory = tempfile.TemporaryDirectory(prefix="countersign-templates-")
        path = str(Path(_directory.name) / f"{uuid.uuid4().hex}.sqlite3")
        _build_sqlite(path, building, recipe)
        return path
    name = f"countersign_template_{uuid.uuid4().hex[:12]}"
    _admin(like_url, f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(like_url)._replace(path=f"/{name}"))
    building["DATABASE_URL"] = url
    try:
        recipe(building)
    except BaseException:
        _admin(like_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        raise
    return url


def _build_sqlite(path: str, building: dict[str, str], recipe: Recipe) -> None:
    building["DATABASE_URL"] = f"sqlite:///{path}"
    recipe(building)
    # Everything in the main file, so that a copy of that file is the whole database.
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _build_shared_sqlite(key: tuple[str, ...], building: dict[str, str], recipe: Recipe) -> str:
    """The run's template for ``key``: built here unless another pytest process has built it."""
    assert _shared is not None
    name = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
    path = _shared / f"{name}.sqlite3"
    with (_shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed: by a process that died, too
        if not path.exists():
            # Built under another name and renamed: a template's name always means a whole one.
            building_path = _shared / f"{name}.{os.getpid()}.building.sqlite3"
            _build_sqlite(str(building_path), building, recipe)
            for suffix in ("-wal", "-shm"):
                Path(f"{building_path}{suffix}").unlink(missing_ok=True)
            building_path.rename(path)
    return str(path)


def _copy_sqlite(template: str, path: str) -> None:
    target = Path(path)
    if target.exists() and target.stat().st_size > 0:
        raise AssertionError(f"{target} is not a new database")
    for suffix in ("-wal", "-shm"):
        if Path(template + suffix).exists() and Path(template + suffix).stat().st_size > 0:
            raise AssertionError(f"the template {template} has a {suffix} file left")
    shutil.copyfile(template, target)


def _copy_postgres(template_url: str, database_url: str) -> None:
    template = urlsplit(template_url).path.lstrip("/")
    name = urlsplit(database_url).path.lstrip("/")
    # The caller made it (empty, nobody connected): it becomes the template's copy.
    _admin(database_url, f'DROP DATABASE IF EXISTS "{name}"')
    _admin(database_url, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')


def _admin(any_url: str, sql: str) -> None:
    import psycopg

    admin = urlunsplit(urlsplit(any_url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def drop_all() -> None:
    """Remove every template this process made."""
    global _directory
    with _lock:
        for url in _templates.values():
            if not url.startswith("/"):
                name = urlsplit(url).path.lstrip("/")
                _admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        _templates.clear()
        if _directory is not None:
            _directory.cleanup()
            _directory = None
