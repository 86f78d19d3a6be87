"""How pytest-xdist spreads the suite over workers with ``-n N`` (.ci/run passes ``-n 3``),
in its default ``--dist load`` mode or ``--dist loadgroup``: each test is a unit of its
own, sent to whichever worker is free, except that

- the tests of a module that share a fixture wider than one test (a module-scoped
  platform, the SparkSession of the Spark job tests) form one unit, so that the fixture
  starts once instead of once per worker (or once per test, when other modules' tests
  come between two of them on a worker);
- tests marked ``xdist_group(name)`` form one unit per name.

The workers, which collect the tests, write each grouped test's unit to a JSON file per
worker in a directory the controller names (``workerinput``); the controller's scheduler
reads them once every worker has collected. pytest-xdist's own ``loadgroup`` reads the
mark through a suffix it writes into the node id, which pytest 9.2 no longer takes
(pytest-dev/pytest-xdist#1386); this scheduler takes the suffix too when it is there.
Without ``-n`` none of this runs. tests/conftest.py loads this module as a plugin.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

_DIR_KEY = "vpq_xdist_groups_dir"
_dir_key = pytest.StashKey[Path]()
_SHARED_SCOPES = frozenset({"class", "module", "package"})


def group_of(item: pytest.Item) -> str | None:
    """The unit ``item`` belongs to: its ``xdist_group`` names, else its module when it
    uses a fixture wider than a test, else None (a unit of its own)."""
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")})
    if names:
        return "_".join(names)
    info = getattr(item, "_fixtureinfo", None)
    if info is not None and any(d and d[-1].scope in _SHARED_SCOPES for d in info.name2fixturedefs.values()):
        return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Controller: tell each worker where to write its groups."""
    config = node.config
    if _dir_key not in config.stash:
        config.stash[_dir_key] = Path(tempfile.mkdtemp(prefix="vpq-xdist-groups-"))
    node.workerinput[_DIR_KEY] = str(config.stash[_dir_key])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Worker: write node id -> unit of every grouped test."""
    workerinput = getattr(config, "workerinput", None)
    if not workerinput or _DIR_KEY not in workerinput:
        return
    groups = {item.nodeid: g for item in items if (g := group_of(item)) is not None}
    path = Path(workerinput[_DIR_KEY]) / f"{workerinput['workerid']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    tmp.replace(path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Controller: ``--dist load`` (the default of ``-n``) and ``--dist loadgroup`` use
    ``GroupScheduling``; the other modes (loadfile, loadscope, worksteal, ...) are xdist's."""
    if config.getoption("dist") not in ("load", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """LoadScopeScheduling whose scope is the test's unit (module doc)."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if "@" in nodeid and nodeid.rfind("@") > nodeid.rfind("]"):
                return nodeid.rsplit("@", 1)[-1]  # a suffix from xdist's own loadgroup
            if self._groups is None:  # first called once every worker has collected
                self._groups = {}
                folder = config.stash.get(_dir_key, None)
                for f in sorted(folder.glob("*.json")) if folder is not None else ():
                    self._groups.update(json.loads(f.read_text()))
            return self._groups.get(nodeid, nodeid)

        def remove_node(self, node):  # type: ignore[no-untyped-def]
            """xdist's, but only the units with tests still to run go back on the queue,
            and the test the worker died on counts as run (xdist has reported it
            failed). xdist 3.8 puts the node's finished units back too; handed out
            again, they hold no test, so the worker that gets one never asks for more
            and the run hangs at its end (pytest-dev/pytest-xdist#1378, #1371)."""
            workload = self.assigned_work.pop(node)
            pending = [(scope, unit) for scope, unit in workload.items() if not all(unit.values())]
            if not pending:
                return None
            crashitem = next(nodeid for _scope, unit in pending for nodeid, done in unit.items() if not done)
            for scope, unit in pending:
                unit.pop(crashitem, None)
                if unit and not all(unit.values()):
                    self.workqueue[scope] = unit
            for other in self.assigned_work:
                self._reschedule(other)
            return crashitem

        def _reschedule(self, node) -> None:  # type: ignore[no-untyped-def]
            """xdist's, and once the queue is empty every node is told so: a worker runs
            its last test only when it has a next one or is told to shut down, and a
            worker that replaced a crashed one may hold a single test
            (pytest-dev/pytest-xdist#1327)."""
            super()._reschedule(node)
            if not self.workqueue:
                for other in self.assigned_work:
                    if not other.shutting_down:
                        other.shutdown()

    return GroupScheduling(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_dir_key, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
