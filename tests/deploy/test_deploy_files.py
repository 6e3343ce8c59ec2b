"""docs/deploy.md, the files in deploy/, the Procfile and config/settings.py say the same things."""

from __future__ import annotations

import os
import re
import secrets
import shlex
from pathlib import Path

import pytest

from tests.support import zygote

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "deploy.md").read_text()
SYSTEMD = ROOT / "deploy" / "systemd"


def _settings_variables() -> set[str]:
    source = (ROOT / "config" / "settings.py").read_text()
    return set(re.findall(r'_env(?:_bool|_list)?\(\s*"([A-Z][A-Z0-9_]*)"', source))


def _env_file() -> dict[str, str]:
    pairs = {}
    for line in (ROOT / "deploy" / "countersign.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            pairs[name.strip()] = value.strip()
    return pairs


def _procfile() -> dict[str, list[str]]:
    processes = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        name, colon, command = line.partition(":")
        if colon and not name.startswith("#"):
            processes[name.strip()] = shlex.split(command)
    return processes


def _exec_start(unit: str) -> list[list[str]]:
    """Every ``ExecStart=`` of a unit (a oneshot may have several, which configparser would merge)."""
    text = (SYSTEMD / unit).read_text()
    return [shlex.split(line.split("=", 1)[1]) for line in text.splitlines() if line.startswith("ExecStart=")]


def _without_venv(command: list[str]) -> list[str]:
    return [Path(command[0]).name, *command[1:]]


def test_settings_reads_at_least_one_variable() -> None:
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"} <= _settings_variables()


@pytest.mark.parametrize("variable", sorted(_settings_variables()))
def test_every_variable_settings_reads_is_in_the_guide(variable: str) -> None:
    assert f"`{variable}`" in GUIDE


def test_check_deploy_passes_with_the_production_env_file() -> None:
    env = {k: v for k, v in os.environ.items() if k not in _settings_variables()}
    env.update(_env_file(), DJANGO_SETTINGS_MODULE="config.settings", SECRET_KEY=secrets.token_urlsafe(60))
    check = zygote.manage(["check", "--deploy", "--fail-level", "WARNING"], env)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_env_file_names_only_variables_settings_reads() -> None:
    assert set(_env_file()) <= _settings_variables()


def test_systemd_units_start_what_the_procfile_starts() -> None:
    procfile = _procfile()
    [web] = _exec_start("countersign-web@.service")
    [worker] = _exec_start("countersign-worker.service")
    assert _without_venv(web) == [arg.replace("$PORT", "%i") for arg in _without_venv(procfile["web"])]
    assert _without_venv(worker) == _without_venv(procfile["worker"])
    assert set(procfile) == {"web", "worker"}


def test_the_target_starts_every_unit() -> None:
    target = (SYSTEMD / "countersign.target").read_text()
    wanted = re.search(r"^Wants=(.*)$", target, re.MULTILINE)
    assert wanted
    units = set(wanted.group(1).split())
    assert {"countersign-migrate.service", "countersign-worker.service"} <= units
    assert any(u.startswith("countersign-web@") for u in units)


def test_the_guide_shows_the_nginx_file_as_it_is() -> None:
    match = re.search(r"<!-- deploy/nginx\.conf -->\s*```nginx\n(.*?)```", GUIDE, re.DOTALL)
    assert match and match.group(1) == (ROOT / "deploy" / "nginx.conf").read_text()


def test_the_nginx_file_passes_websockets_and_sets_the_proxy_headers() -> None:
    nginx = (ROOT / "deploy" / "nginx.conf").read_text()
    for directive in (
        "proxy_http_version 1.1;",
        "proxy_set_header Host $host;",
        "proxy_set_header X-Forwarded-Proto $scheme;",
        "proxy_set_header X-Forwarded-For $remote_addr;",
        "proxy_set_header Upgrade $http_upgrade;",
        "proxy_set_header Connection $connection_upgrade;",
    ):
        assert directive in nginx
