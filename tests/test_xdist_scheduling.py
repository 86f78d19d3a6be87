"""tests/xdist_scheduling.py on a real ``pytest -n 2`` run of a small suite, in xdist's
default ``--dist load`` mode as .ci/run uses it: the tests sharing a module-scoped fixture run on one worker with the fixture set up
once, the tests of one ``xdist_group`` on one worker, and everything passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_PLUGINS = ["-p", "no:locust", "-p", "no:schemathesis", "-p", "no:hypothesispytest", "-p", "no:anyio"]  # slow to import

SUITE = '''
import json, os, time
import pytest

def note(kind, name):
    with open(os.environ["NOTES"], "a") as f:
        f.write(json.dumps([kind, name, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")

@pytest.fixture(scope="module")
def shared():
    note("setup", "shared")
    yield

@pytest.mark.parametrize("i", range(6))
def test_shared(shared, i):
    time.sleep(0.2)
    note("test", f"shared{i}")

@pytest.mark.xdist_group("pair")
@pytest.mark.parametrize("i", range(4))
def test_grouped(i):
    time.sleep(0.2)
    note("test", f"grouped{i}")

@pytest.mark.parametrize("i", range(6))
def test_alone(i):
    time.sleep(0.2)
    note("test", f"alone{i}")
'''


def test_shared_fixture_and_xdist_group_tests_stay_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    notes = tmp_path / "notes.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # this run may be a worker
    env.update(NOTES=str(notes), PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "pytest", "-n", "2", "-p", "tests.xdist_scheduling",
            "-p", "no:cacheprovider", *NO_PLUGINS, "-q", "--rootdir", str(tmp_path), str(tmp_path / "test_suite.py")]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in notes.read_text().splitlines()]
    worker_of = {name: worker for kind, name, worker in rows if kind == "test"}
    assert len(worker_of) == 16
    assert len({worker_of[f"shared{i}"] for i in range(6)}) == 1
    assert [r for r in rows if r[0] == "setup"] == [["setup", "shared", worker_of["shared0"]]]  # set up once
    assert len({worker_of[f"grouped{i}"] for i in range(4)}) == 1


CRASHING = '''
import json, os, time
import pytest

def note(name):
    with open(os.environ["NOTES"], "a") as f:
        f.write(json.dumps(name) + "\\n")

@pytest.mark.parametrize("i", range(12))
def test_before(i):
    time.sleep(0.05)
    note(f"before{i}")

def test_dies():
    note("dies")
    os._exit(1)  # as pytest-timeout's thread method ends a worker

@pytest.mark.parametrize("i", range(12))
def test_after(i):
    time.sleep(0.05)
    note(f"after{i}")
'''


def test_a_worker_that_dies_fails_its_test_and_the_run_still_ends(tmp_path: Path) -> None:
    """The worker running ``test_dies`` exits: that test fails once (it is not run again on
    the replacement worker), every other test runs once and passes, and the run ends
    instead of hanging on the dead worker's finished units."""
    (tmp_path / "test_crash.py").write_text(CRASHING)
    notes = tmp_path / "notes.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.update(NOTES=str(notes), PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "pytest", "-n", "2", "-p", "tests.xdist_scheduling",
            "-p", "no:cacheprovider", *NO_PLUGINS, "-q", "--rootdir", str(tmp_path), str(tmp_path / "test_crash.py")]  # fmt: skip
    try:
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the run hung after a worker died:\n{exc.stdout}") from None
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 24 passed" in done.stdout, done.stdout
    names = [json.loads(line) for line in notes.read_text().splitlines()]
    assert sorted(names) == sorted(["dies", *(f"before{i}" for i in range(12)), *(f"after{i}" for i in range(12))])
