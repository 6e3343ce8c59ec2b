"""A server process freezes what it loaded at start-up (``config/asgi.py``), so that the collector's
full collections no longer walk it and stall the event loop for tens of milliseconds each
(``bench/gc_pauses.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import gc, json
before = gc.get_freeze_count()
import config.asgi
print(json.dumps({"before": before, "after": gc.get_freeze_count(), "enabled": gc.isenabled(),
                  "walked": len(gc.get_objects())}))
"""


def test_loading_the_asgi_application_freezes_the_start_up_objects_and_keeps_collecting() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # Django, Channels, pydantic-ai and the app: well over 100,000 objects in practice.
    assert found["after"] - found["before"] > 50_000
    # What a full collection still walks is what was made after the freeze: a few objects.
    assert found["walked"] < found["after"] / 10
    assert found["enabled"]  # frozen, not switched off: cycles made while serving are still freed
