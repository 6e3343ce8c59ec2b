"""`make run`: its banner (where to open, how to log in) and ``HOST=`` for a demo on the network.

``scripts/run-hosts`` names the hosts a browser can use to reach the bound address; `make run` gives
them to Django as ALLOWED_HOSTS, and the CSRF and websocket origin checks then accept pages served
under them (and still refuse any other origin).
"""

from __future__ import annotations

import io
import os
import subprocess
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from approvals.live.origins import origin_allowed
from tests.support.users import PASSWORD, ensure_groups

ROOT = Path(__file__).resolve().parents[2]


def _run_hosts() -> ModuleType:
    loader = SourceFileLoader("run_hosts", str(ROOT / "scripts" / "run-hosts"))
    spec = spec_from_loader("run_hosts", loader)
    assert spec is not None
    module = module_from_spec(spec)
    loader.exec_module(module)
    return module


run_hosts = _run_hosts()


def test_hosts_for_the_bound_address() -> None:
    assert run_hosts.hosts("127.0.0.1") == ["127.0.0.1", "localhost"]
    assert run_hosts.hosts("192.168.1.5") == ["192.168.1.5"]
    assert run_hosts.hosts("::1") == ["[::1]"]
    everywhere = run_hosts.hosts("0.0.0.0")
    assert everywhere[-2:] == ["127.0.0.1", "localhost"]
    network = run_hosts._network_addresses(run_hosts.socket.AF_INET)
    assert everywhere[:-2] == [*network, run_hosts.socket.gethostname()]


def test_make_run_binds_host_and_allows_its_names() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k != "DEBUG"}
    dry = subprocess.run(
        ["make", "-n", "run", "HOST=192.168.1.5", "PORT=9001"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "scripts/run-hosts '192.168.1.5'" in dry
    assert 'urls="$urls http://$host:9001/"' in dry
    assert "demo_setup --banner $urls" in dry
    assert "ALLOWED_HOSTS=\"${ALLOWED_HOSTS:-$(echo $hosts | tr ' ' ,)}\"" in dry
    assert "daphne -b '192.168.1.5' -p '9001' config.asgi:application" in dry
    # Beside it, the demo MCP gateway, on this machine only (docs/mcp-gateway.md).
    assert "mcp_gateway --config demo/mcp_gateway.toml --host 127.0.0.1 --port '8765' &" in dry
    # Plain HTTP: cookies marked HTTPS-only would be dropped (DEBUG=false) and the login with them.
    assert 'SECURE_COOKIES="${SECURE_COOKIES:-false}"' in dry


@pytest.mark.django_db
def test_the_banner_says_where_to_open_and_how_to_log_in() -> None:
    ensure_groups()  # (a transactional test run before this one in the worker flushed them)
    out = io.StringIO()
    call_command(
        "demo_setup", "--no-seed", "--banner", "http://192.168.1.5:9001/", "http://vm:9001/", stdout=out
    )
    banner = out.getvalue().split("=" * 78)[1]
    assert "Open http://192.168.1.5:9001/" in banner
    assert "or http://vm:9001/" in banner
    assert "Log in as 'reviewer' with password 'countersign-demo'" in banner
    # The login it prints is one that works.
    form = {"username": "reviewer", "password": "countersign-demo"}
    assert Client().post("/accounts/login/", form).status_code == 302


def _network_settings(settings: Any) -> None:
    settings.ALLOWED_HOSTS = run_hosts.hosts("192.168.1.5")
    settings.CSRF_TRUSTED_ORIGINS = []
    settings.LIVE_TRUSTED_ORIGINS = []
    settings.SECURE_PROXY_SSL_HEADER = None


def test_a_page_on_the_network_address_may_open_the_live_socket(settings: Any) -> None:
    _network_settings(settings)

    def scope(origin: str) -> dict[str, Any]:
        return {
            "type": "websocket",
            "headers": [(b"host", b"192.168.1.5:9001"), (b"origin", origin.encode())],
        }

    assert origin_allowed(scope("http://192.168.1.5:9001"))
    assert not origin_allowed(scope("http://192.168.1.6:9001"))
    assert not origin_allowed(
        {
            "type": "websocket",
            "headers": [(b"host", b"evil.example:9001"), (b"origin", b"http://evil.example:9001")],
        }
    )


def test_login_over_the_network_address_passes_csrf(reviewer: User, settings: Any) -> None:
    _network_settings(settings)
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = False  # what DEBUG=true gives
    site = {"HTTP_HOST": "192.168.1.5:9001", "HTTP_ORIGIN": "http://192.168.1.5:9001"}
    client = Client(enforce_csrf_checks=True)
    token = client.get("/accounts/login/", **site).cookies["csrftoken"].value
    form = {"username": reviewer.username, "password": PASSWORD, "csrfmiddlewaretoken": token}
    assert client.post("/accounts/login/", form, **site).status_code == 302
    assert Client().get("/accounts/login/", HTTP_HOST="192.168.1.6:9001").status_code == 400
