"""Packaging: vpq installs under one top-level name, and every module folder is installed."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tool = data["tool"]["setuptools"]
    assert all(name.startswith("vpq.") for name in tool["packages"])
    return tool["package-dir"]


def test_every_folder_with_modules_is_a_declared_package():
    declared = _declared()
    folders = {
        str(init.parent.relative_to(ROOT))
        for init in ROOT.glob("**/__init__.py")
        if not ({".venv", "tests", "build"} & set(init.relative_to(ROOT).parts))
    }
    assert folders == set(declared.values())
    assert all(name == "vpq." + path.replace("/", ".") for name, path in declared.items())


def test_import_linter_sees_every_top_level_package():
    # vpq has no __init__.py, so lint-imports takes each vpq.<package> as a root package;
    # one left out would hide the imports that pass through it
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    top_level = {name for name in _declared() if name.count(".") == 1}
    assert set(data["tool"]["importlinter"]["root_packages"]) == top_level


def test_installed_modules_live_under_vpq_only():
    # run outside the repository so that its folders are not on sys.path
    code = (
        "import importlib.util as u, vpq.config.settings, vpq.gateway.app, vpq.cli.main;"
        "print([n for n in ('config', 'common', 'cli', 'sdk', 'load', 'metadata', 'gateway')"
        " if u.find_spec(n) is not None])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
