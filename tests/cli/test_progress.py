"""Progress on stderr (cli/progress.py): the line texts, the stage lines, Spark's tracker."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

from rich.console import Console

from vpq.cli.progress import SparkWatcher, StageInfo, Stages, done_line, seconds, spark_detail


def test_line_texts() -> None:
    assert seconds(0.43) == "0.4 s" and seconds(75) == "1 min 15 s"
    assert done_line("planning moves", 0.43) == "✓ planning moves  0.4 s"
    assert spark_detail([]) == ""
    one = StageInfo(7, "collect at job.py:257", tasks=200, active=4, completed=150)
    assert spark_detail([one]) == "Spark stage 7 (collect): 150/200 tasks"
    assert spark_detail([StageInfo(9, "", 1, 1, 0), one]) == "Spark stage 7 (collect): 150/200 tasks +1 more"


def test_stages_print_one_line_per_finished_stage() -> None:
    out = io.StringIO()
    ticks = iter([0.0, 1.5, 1.5, 2.0])
    with Stages(Console(file=out, width=80), clock=lambda: next(ticks)) as stages:
        stages.stage("reading statistics")
        stages.detail("Spark stage 1 (collect): 1/2 tasks")
        stages.stage("planning moves")
    assert out.getvalue().splitlines() == ["✓ reading statistics  1.5 s", "✓ planning moves  0.5 s"]


def test_a_failed_stage_prints_no_check_mark() -> None:
    out = io.StringIO()
    try:
        with Stages(Console(file=out, width=80)) as stages:
            stages.stage("publishing")
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert "✓" not in out.getvalue()


def test_spark_watcher_reports_the_active_stages() -> None:
    info = SimpleNamespace(stageId=3, name="parquet at job.py:130", numTasks=8, numActiveTasks=2, numCompletedTasks=5)
    tracker = SimpleNamespace(getActiveStageIds=lambda: [3], getStageInfo=lambda i: info if i == 3 else None)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: tracker))
    seen: list[str] = []
    with SparkWatcher(spark, seen.append, interval_s=0.01):
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    assert seen and seen[0] == "Spark stage 3 (parquet): 5/8 tasks"

