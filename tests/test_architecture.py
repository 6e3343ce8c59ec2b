"""The runtime is a library: ``agents_runtime`` must never import Django, Channels or our Django code.

Checked on the source with ``ast`` rather than by importing, so that an import hidden in a function
body, a ``TYPE_CHECKING`` block or a rarely taken branch is caught too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "agents_runtime"
FORBIDDEN = frozenset({"django", "channels", "approvals", "demo"})


def forbidden_imports(package: Path) -> list[str]:
    """Every import of a FORBIDDEN top-level package in ``package``'s .py files, as "file:line: name"."""
    problems = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent)
        # How many package levels a relative import may climb and still stay inside `package`.
        depth = len(relative.parts) - 1
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0 and node.module:
                    names = [node.module]
                elif node.level > depth:
                    names = [("." * node.level) + (node.module or "") + " (climbs out of the package)"]
            elif (
                # importlib.import_module("django...") / __import__("django...") with a literal name.
                isinstance(node, ast.Call)
                and (
                    (isinstance(node.func, ast.Name) and node.func.id in {"__import__", "import_module"})
                    or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                )
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names = [node.args[0].value]
            for name in names:
                top = name.split(".")[0]
                if top in FORBIDDEN or "climbs out" in name:
                    problems.append(f"{relative}:{getattr(node, 'lineno', '?')}: {name}")
    return problems


def test_runtime_never_imports_django_channels_or_the_app() -> None:
    assert list(RUNTIME.rglob("*.py")), f"no Python files under {RUNTIME}: is the path wrong?"
    assert forbidden_imports(RUNTIME) == []


@pytest.mark.parametrize(
    "source",
    [
        "import django",
        "import os, channels.layers",
        "from django.db import models",
        "from approvals.models import SuspendedRun",
        "def f():\n    from demo import agents\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import django.http\n",
        "import importlib\nimportlib.import_module('django.conf')",
        "__import__('channels')",
        "from ... import approvals",
    ],
)
def test_the_check_catches_each_kind_of_import(tmp_path: Path, source: str) -> None:
    package = tmp_path / "agents_runtime"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "inner" / "module.py").write_text(source + "\n")
    assert forbidden_imports(package) != []


def test_the_check_allows_the_runtimes_own_and_third_party_imports(tmp_path: Path) -> None:
    package = tmp_path / "agents_runtime"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("from .inner import module\n")
    (package / "inner" / "__init__.py").write_text("")
    (package / "inner" / "module.py").write_text(
        "import pydantic_ai\nfrom pydantic import BaseModel\nfrom .. import errors\nfrom ..errors import X\n"
        "import djangoish\n"
    )
    assert forbidden_imports(package) == []
