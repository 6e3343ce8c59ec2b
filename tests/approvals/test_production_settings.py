"""Running behind an HTTPS reverse proxy, with the documented production settings."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings as configured
from django.contrib.auth.models import User
from django.core import checks
from django.test import Client

from tests.support import zygote
from tests.support.users import PASSWORD

ROOT = Path(__file__).resolve().parents[2]
PROXIED = {
    "HTTP_HOST": "desk.example.com",
    "HTTP_X_FORWARDED_PROTO": "https",
    "HTTP_ORIGIN": "https://desk.example.com",
    "HTTP_REFERER": "https://desk.example.com/accounts/login/",
}


def _proxied_login(settings: Any) -> int:
    settings.ALLOWED_HOSTS = ["desk.example.com"]
    client = Client(enforce_csrf_checks=True)
    form = client.get("/accounts/login/", **PROXIED)
    token = form.cookies["csrftoken"].value
    response = client.post(
        "/accounts/login/",
        {"username": "rita", "password": PASSWORD, "csrfmiddlewaretoken": token},
        **PROXIED,
    )
    return response.status_code


def test_login_through_an_https_proxy_works_once_the_proxy_header_is_trusted(
    reviewer: User, settings: Any
) -> None:
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert _proxied_login(settings) == 302


def test_without_the_proxy_setting_the_https_origin_is_refused(reviewer: User, settings: Any) -> None:
    settings.SECURE_PROXY_SSL_HEADER = None
    assert _proxied_login(settings) == 403


def test_check_deploy_passes_with_the_documented_production_settings() -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"DEBUG"}},
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(60),
        "ALLOWED_HOSTS": "desk.example.com",
        "CSRF_TRUSTED_ORIGINS": "https://desk.example.com",
        "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO=https",
        "SECURE_SSL_REDIRECT": "true",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
        "SECURE_HSTS_PRELOAD": "true",
        "EMAIL_HOST": "smtp.example.com",
    }
    check = zygote.manage(["check", "--deploy", "--fail-level", "WARNING"], env)
    assert check.returncode == 0, check.stdout + check.stderr


def _deploy_warnings() -> set[str]:
    found = checks.run_checks(include_deployment_checks=True, tags=[checks.Tags.security])
    return {message.id for message in found if message.id and message.id.startswith("security.")}


def test_deploy_checks_still_check_the_settings_of_the_middlewares_run_on_the_loop(settings: Any) -> None:
    """The security, CSRF and X-Frame-Options middlewares are listed as their loop versions
    (approvals/server/loop_middleware.py); Django's checks of their settings still run."""
    assert "django.middleware.csrf.CsrfViewMiddleware" not in list(configured.MIDDLEWARE)
    settings.SECURE_HSTS_SECONDS = 0
    settings.SECURE_SSL_REDIRECT = False
    settings.CSRF_COOKIE_SECURE = False
    settings.X_FRAME_OPTIONS = "SAMEORIGIN"

    warnings = _deploy_warnings()

    assert {"security.W004", "security.W008", "security.W016", "security.W019"} <= warnings
    assert not warnings & {"security.W001", "security.W002", "security.W003"}  # none seen as absent

    # The same names in a plain list: Django finds none of the three, and checks none of their settings.
    settings.MIDDLEWARE = list(configured.MIDDLEWARE)
    assert {"security.W001", "security.W002", "security.W003"} <= _deploy_warnings()


def _start(*, debug: str, secret_key: str | None, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY"}}
    env |= {"DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": debug}
    if secret_key is not None:
        env["SECRET_KEY"] = secret_key
    return zygote.zygote.run([sys.executable, "-c", code], env=env)


SERVE = "import config.asgi; print('serving')"


def test_the_server_refuses_to_start_with_the_public_secret_key_when_debug_is_off() -> None:
    refused = _start(debug="false", secret_key=None, code=SERVE)
    assert refused.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is the public development default" in refused.stderr
    assert "Set SECRET_KEY to a long random value" in refused.stderr
    wsgi = _start(debug="false", secret_key=None, code="import config.wsgi")
    assert "SECRET_KEY is the public development default" in wsgi.stderr
    # The deployment file's placeholder, left as it is, is as public.
    placeholder = _start(debug="false", secret_key="change-me", code=SERVE)
    assert "SECRET_KEY is the public development default" in placeholder.stderr


def test_the_server_starts_with_its_own_key_or_with_debug_on() -> None:
    assert _start(debug="false", secret_key=secrets.token_urlsafe(60), code=SERVE).stdout == "serving\n"
    assert _start(debug="true", secret_key=None, code=SERVE).stdout == "serving\n"


def test_check_deploy_fails_on_the_public_secret_key() -> None:
    checked = _start(
        debug="false",
        secret_key=None,
        code="import sys; from django.core.management import execute_from_command_line as run; "
        "run(['manage.py', 'check', '--deploy'])",
    )
    assert checked.returncode != 0
    assert "(countersign.E001) SECRET_KEY is the public development default" in checked.stderr


def test_make_run_with_debug_off_says_what_to_set() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    env = {k: v for k, v in env.items() if k not in {"DEBUG", "SECRET_KEY"}}
    made = subprocess.run(
        ["make", "run", "DEBUG=false"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert made.returncode != 0
    assert "DEBUG is off: set SECRET_KEY to a long random value first" in made.stdout
    # Nothing was installed, migrated or started before it said so.
    assert "migrate" not in made.stdout + made.stderr


def test_a_malformed_rate_limit_stops_the_server_at_start_saying_how_to_write_it() -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG"}}
    env |= {"DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "true"}
    refused = zygote.zygote.run([sys.executable, "-c", SERVE], env=env | {"API_DECISION_RATE_LIMIT": "lots"})
    assert refused.returncode != 0
    assert (
        "ImproperlyConfigured: API_DECISION_RATE_LIMIT is 'lots': write it <count>/<seconds>"
        in refused.stderr
    )
    for written in ("0", "0/60", "120", "120/60"):
        started = zygote.zygote.run(
            [sys.executable, "-c", SERVE], env=env | {"API_DECISION_RATE_LIMIT": written}
        )
        assert started.stdout == "serving\n", started.stderr


def test_a_malformed_open_waits_limit_stops_the_server_at_start_saying_how_to_write_it() -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG"}}
    env |= {"DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "true"}
    for wrong in ("lots", "-1", "1.5", "1001"):
        refused = zygote.zygote.run(
            [sys.executable, "-c", SERVE], env=env | {"API_OPEN_WAITS_PER_CALLER": wrong}
        )
        assert refused.returncode != 0
        assert (
            f"ImproperlyConfigured: API_OPEN_WAITS_PER_CALLER is {wrong!r}: write a count" in refused.stderr
        )
    for written in ("0", "32", "1000"):
        started = zygote.zygote.run(
            [sys.executable, "-c", SERVE], env=env | {"API_OPEN_WAITS_PER_CALLER": written}
        )
        assert started.stdout == "serving\n", started.stderr
