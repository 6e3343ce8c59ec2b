"""Which of our files one decision passes through: a reviewer's Approve, from the POST to the tool.

Starts a demo run (the ``support`` agent asks to approve a refund) in a fresh SQLite database, then
posts Approve as htmx does, through Django's test ``Client`` (the whole request: middleware, view,
services, runtime, store, continuation, outcome card), and records every function call in the
project's own code (``sys.setprofile``): the files, in the order first entered, and the templates
rendered. A measure of how far a reader must follow one decision (the restructuring issue asked for
fewer than the 27 files it took then).

    .venv/bin/python bench/decision_path.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agents_runtime", "approvals", "config", "demo")


def worker() -> None:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from asgiref.sync import async_to_sync
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.test import Client
    from django.test.signals import template_rendered
    from django.test.utils import setup_test_environment

    setup_test_environment()
    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(username="bench-reviewer")
    user.groups.add(Group.objects.get(name="Admins"))
    client = Client()
    client.force_login(user)
    try:
        from approvals import agents

        agent = agents.get("support")
    except ImportError:  # before the restructuring (for a before/after count)
        from approvals import registry  # type: ignore[attr-defined]

        agent = registry.get_runtime().get_agent("support")
    run = async_to_sync(agent.generate)("Please refund order A-1044, $890")
    assert run.status == "suspended", run
    call = run.tool_calls[0]
    url = f"/runs/{run.run_id}/calls/{call.tool_call_id}/approve"
    client.get(f"/runs/{run.run_id}/")  # warm: imports and caches are not part of a decision

    files: list[str] = []
    seen: set[str] = set()
    roots = tuple(str(ROOT / p) + os.sep for p in PACKAGES)

    def profile(frame: Any, event: str, arg: Any) -> None:
        name = frame.f_code.co_filename
        if event == "call" and name.startswith(roots) and name not in seen:
            seen.add(name)
            files.append(os.path.relpath(name, ROOT))

    templates: list[str] = []
    template_rendered.connect(lambda sender, template, **kw: templates.append(template.name), weak=False)
    import threading

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        response = client.post(url, {"agent": "support"}, headers={"HX-Request": "true"})
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert response.status_code == 200, response.status_code
    assert "Completed" in response.content.decode(), response.content[:400]
    names = sorted({t for t in templates if t})
    print(f"{len(files)} Python files of ours, in the order a decision enters them:")
    for name in files:
        print(f"  {name}")
    print(f"{len(names)} templates: {', '.join(names)}")


def main() -> None:
    if "--worker" in sys.argv:
        worker()
        return
    with tempfile.TemporaryDirectory(prefix="decision-path-") as tmp:
        env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp}/path.sqlite3", "LOG_LEVEL": "WARNING"}
        env.pop("REDIS_URL", None)
        env.pop("TASKS_BACKEND", None)
        subprocess.run([sys.executable, __file__, "--worker"], cwd=ROOT, env=env, check=True)


if __name__ == "__main__":
    main()
