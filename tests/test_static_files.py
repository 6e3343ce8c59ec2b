"""Static files: collected with hashed names and gzip variants, served by the ASGI app itself.

One process with ``DEBUG`` off serves a styled app without a proxy (approvals/server/static_files.py): pages
name the hashed files, which answer with a cache header of ten years and gzip for clients that take
it; without ``collectstatic`` such a server answers every request with what to run; in ``DEBUG``
the files come straight from ``static/``.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.test import Client
from django.utils.module_loading import import_string

from approvals.server.static_files import StaticFiles
from tests.support import zygote

ROOT = Path(__file__).resolve().parent.parent

# The module's tests share its collected files: one worker runs them all, so collectstatic runs once,
# not once per worker.
pytestmark = pytest.mark.xdist_group("test_static_files")
APP_CSS = (ROOT / "static" / "countersign" / "app.css").read_bytes()
HASHED = re.compile(r"/static/countersign/app\.[0-9a-f]{12}\.css")
TEN_YEARS = "max-age=315360000, public, immutable"


def _collectstatic(static_root: Path) -> None:
    # The admin's files are left out: compressing them takes seconds and shows nothing more.
    env = {**os.environ, "DEBUG": "false", "STATIC_ROOT": str(static_root)}
    done = zygote.manage(["collectstatic", "--noinput", "-v", "0", "-i", "admin"], env)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    static_root = tmp_path_factory.mktemp("collected")
    _collectstatic(static_root)
    return static_root


@pytest.fixture
def production(settings: Any, collected: Path) -> Path:
    settings.DEBUG = False
    settings.STATIC_ROOT = collected
    return collected


async def _get(app: Any, path: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    """One request through an ASGI app: status, headers (lower-case names) and body."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")]
        + [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if requested:  # Django listens for a disconnect while the view runs: never comes here.
            import asyncio

            await asyncio.Event().wait()
        requested = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    headers_out = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], headers_out, b"".join(m.get("body", b"") for m in sent[1:])


def test_pages_name_the_hashed_files(production: Path) -> None:
    page = Client().get("/accounts/login/").content.decode()
    assert HASHED.search(page), page
    assert re.search(r"/static/countersign/app\.[0-9a-f]{12}\.js", page)


async def test_a_hashed_file_is_served_for_ten_years_with_a_gzip_variant(production: Path) -> None:
    app = StaticFiles(ASGIHandler())
    css = HASHED.search(await _page()).group(0)  # type: ignore[union-attr]

    status, headers, body = await _get(app, css)
    assert (status, body) == (200, APP_CSS)
    assert headers["cache-control"] == TEN_YEARS
    assert headers["content-type"].startswith("text/css")
    assert headers["x-content-type-options"] == "nosniff"
    assert "content-encoding" not in headers
    assert "access-control-allow-origin" not in headers

    status, headers, body = await _get(app, css, accept_encoding="gzip, deflate, br")
    assert status == 200
    assert headers["content-encoding"] == "gzip"
    assert headers["vary"] == "Accept-Encoding"
    assert len(body) < len(APP_CSS)
    assert gzip.decompress(body) == APP_CSS

    status, headers, body = await _get(app, css, if_none_match=headers["etag"])
    assert (status, body) == (304, b"")

    status, headers, body = await _get(app, css, method="HEAD")
    assert (status, body, headers["content-length"]) == (200, b"", str(len(APP_CSS)))


async def _page() -> str:
    from asgiref.sync import sync_to_async

    response = await sync_to_async(Client().get)("/accounts/login/")
    return str(response.content.decode())


async def test_unhashed_names_are_cached_briefly_and_unknown_files_are_djangos_404(production: Path) -> None:
    app = StaticFiles(ASGIHandler())
    status, headers, body = await _get(app, "/static/countersign/app.css")
    assert (status, body) == (200, APP_CSS)
    assert headers["cache-control"] == "max-age=60, public"

    for missing in ("/static/countersign/nope.css", "/static/countersign/app.0123456789ab.css"):
        status, headers, _ = await _get(app, missing)
        assert status == 404, missing
        assert "cache-control" not in headers or "immutable" not in headers["cache-control"]

    # Outside STATIC_ROOT: nothing but the collected files is served.
    status, _, _ = await _get(app, "/static/../config/settings.py")
    assert status == 404
    status, _, _ = await _get(app, "/static/countersign/app.css", method="POST")
    assert status == 405


async def test_in_debug_the_files_come_from_static_without_collectstatic(
    settings: Any, tmp_path: Path
) -> None:
    settings.DEBUG = True
    settings.STATIC_ROOT = tmp_path  # nothing collected
    app = StaticFiles(ASGIHandler())
    status, headers, body = await _get(app, "/static/countersign/app.css")
    assert (status, body) == (200, APP_CSS)
    assert headers["cache-control"] == "max-age=0, public"
    assert 'href="/static/countersign/app.css"' in await _page()


def test_pages_use_plain_names_while_nothing_is_collected(settings: Any, tmp_path: Path) -> None:
    """What the test suite and a fresh clone's `manage.py` see: working pages, not manifest errors."""
    settings.STATIC_ROOT = tmp_path
    page = Client().get("/accounts/login/").content.decode()
    assert 'href="/static/countersign/app.css"' in page


def test_the_django_middleware_chain_stays_async() -> None:
    """Why static files are served before Django: one sync-only middleware (WhiteNoise's is one)
    would make Django adapt every request of the async views through a thread."""
    from django.conf import settings

    # Django's own default for a middleware that does not say: sync only.
    sync_only = [
        path for path in settings.MIDDLEWARE if not getattr(import_string(path), "async_capable", False)
    ]
    assert sync_only == []


_SERVE = """
import asyncio, json, sys
from config.asgi import application
from tests.test_static_files import _get

async def main():
    status, _, page = await _get(application, "/accounts/login/")
    css = sys.argv[1] + page.decode().split(sys.argv[1], 1)[1].split('"', 1)[0]
    css_status, headers, _ = await _get(application, css, accept_encoding="gzip")
    print(json.dumps({"page": status, "css": css, "css_status": css_status, "headers": headers}))

asyncio.run(main())
"""


def _server_env(static_root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DEBUG": "false",
        "STATIC_ROOT": str(static_root),
        "ALLOWED_HOSTS": "testserver",
        "DATABASE_URL": "sqlite:///:memory:",
    }


def test_the_asgi_app_serves_collected_files_with_debug_off(collected: Path) -> None:
    done = zygote.zygote.run(
        [sys.executable, "-c", _SERVE, "/static/countersign/app."], env=_server_env(collected)
    )
    assert done.returncode == 0, done.stderr
    served = json.loads(done.stdout.strip().splitlines()[-1])
    assert served["page"] == 200
    assert HASHED.fullmatch(served["css"]), served
    assert served["css_status"] == 200
    assert served["headers"]["cache-control"] == TEN_YEARS
    assert served["headers"]["content-encoding"] == "gzip"


async def test_with_debug_off_and_nothing_collected_every_request_says_what_to_run(
    settings: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings.DEBUG = False
    settings.STATIC_ROOT = tmp_path  # collectstatic never ran
    app = StaticFiles(ASGIHandler())

    page = await _get(app, "/accounts/login/")
    css = await _get(app, "/static/countersign/app.css")

    for status, headers, body in (page, css):
        assert status == 503
        assert headers["content-type"] == "text/plain; charset=utf-8"
        text = body.decode()
        assert "DEBUG is off and there are no collected static files" in text
        assert "manage.py collectstatic --noinput" in text
    assert [r.getMessage() for r in caplog.records if r.name == "approvals.server.static_files"] == [
        "Countersign cannot serve: " + page[2].decode().removeprefix("Countersign cannot serve: ")
    ]
