"""Progress of long CLI work on stderr, so that stdout (figures, the final JSON line)
stays parseable.

``Stages`` shows the stage running now on one live line (spinner, stage, detail,
elapsed time; drawn only when stderr is a terminal, and erased when done) and, when
``log`` is on, prints one line per finished stage on stderr (``✓ planning  0.4 s``),
terminal or not. ``echo`` prints a stdout line without tearing the live line (it is
taken down while the line prints). The line texts are pure functions
(``done_line``, ``spark_detail``) tested on their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, NamedTuple

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn


class StageInfo(NamedTuple):
    """What Spark's status tracker says of one active stage."""

    stage_id: int
    name: str
    tasks: int
    active: int
    completed: int


def seconds(s: float) -> str:
    """``0.43`` -> ``"0.4 s"``, ``75`` -> ``"1 min 15 s"``."""
    if s < 60:
        return f"{s:.1f} s"
    return f"{int(s // 60)} min {int(s % 60)} s"


def done_line(stage: str, elapsed_s: float) -> str:
    """The line printed when a stage ends: ``✓ planning  0.4 s``."""
    return f"✓ {stage}  {seconds(elapsed_s)}"


def spark_detail(stages: Sequence[StageInfo]) -> str:
    """Spark's active stages in a few words: ``Spark stage 7 (collect): 150/200 tasks``;
    several: the first one and ``+N more``; none: ``""``."""
    if not stages:
        return ""
    first = min(stages, key=lambda s: s.stage_id)
    op = first.name.split(" at ")[0].strip() or "stage"
    text = f"Spark stage {first.stage_id} ({op}): {first.completed}/{first.tasks} tasks"
    return text + (f" +{len(stages) - 1} more" if len(stages) > 1 else "")


class Stages:
    """See the module docstring. Use as a context manager; ``stage(name)`` ends the
    current stage and starts the next, ``detail(text)`` updates the live line."""

    def __init__(self, console: Console | None = None, log: bool = True, clock: Callable[[], float] = time.monotonic):
        self.console = console or Console(stderr=True, highlight=False)
        self.log = log
        self.clock = clock
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TextColumn("[dim]{task.fields[detail]}"),
            TimeElapsedColumn(), console=self.console, transient=True, redirect_stdout=False, redirect_stderr=False,
        )
        self._task: TaskID | None = None
        self._name: str | None = None
        self._started = 0.0
        self._live = False

    def __enter__(self) -> Stages:
        self._live = self.console.is_terminal  # not a terminal: no live line at all, only the stage lines
        if self._live:
            self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.end(ok=exc_type is None)
        if self._live:
            self._progress.stop()
        self._live = False

    def stage(self, name: str) -> None:
        self.end()
        self._name, self._started = name, self.clock()
        self._task = self._progress.add_task(name, detail="")

    def detail(self, text: str) -> None:
        if self._task is not None:
            self._progress.update(self._task, detail=text)

    def end(self, ok: bool = True) -> None:
        """End the current stage (if any), printing its line when ``log`` (and it ended well)."""
        if self._task is None:
            return
        self._progress.remove_task(self._task)
        if self.log and ok and self._name:
            self.console.print(done_line(self._name, self.clock() - self._started), style="dim", markup=False)
        self._task, self._name = None, None

    def follow(self, line: Any = "") -> None:
        """``echo`` the line to stdout and show it as the live line's detail: for work
        that already reports its steps through an ``echo`` callback."""
        self.echo(line)
        text = str(line).strip()
        if text:
            self.detail(text if len(text) <= 60 else text[:59] + "…")

    def echo(self, line: Any = "") -> None:
        """``typer.echo`` to stdout without tearing the live line on a shared terminal."""
        if self._live:
            self._progress.stop()
            typer.echo(line)
            self._progress.start()
        else:
            typer.echo(line)


class SparkWatcher:
    """While open, polls ``spark.sparkContext.statusTracker()`` every ``interval_s`` and
    passes ``spark_detail`` of the active stages to ``on_detail`` (from its own thread).
    A tracker that fails (Spark shutting down) is ignored: progress is best effort."""

    def __init__(self, spark: Any, on_detail: Callable[[str], None], interval_s: float = 0.25) -> None:
        import threading

        self._spark, self._on_detail, self._interval = spark, on_detail, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vpq-spark-progress", daemon=True)

    def _poll(self) -> str:
        tracker = self._spark.sparkContext.statusTracker()
        infos = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
        return spark_detail([
            StageInfo(s.stageId, s.name, s.numTasks, s.numActiveTasks, s.numCompletedTasks) for s in infos if s
        ])

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._on_detail(self._poll())
            except Exception:  # noqa: BLE001 - py4j errors while Spark stops: no progress, no failure
                continue

    def __enter__(self) -> SparkWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
