import asyncio
import os
import signal
import sys

from vpq.common.supervisor import ChildSpec, Supervisor

SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]


async def _wait_for(pred, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_crashed_child_is_restarted_and_stop_terminates_all(tmp_path):
    events = []
    sup = Supervisor(tmp_path / "logs", on_event=events.append, backoff_initial_s=0.05)
    await sup.start_child(ChildSpec("a", SLEEPER))
    await sup.start_child(ChildSpec("b", SLEEPER))
    pid_a = sup.pid("a")
    os.kill(pid_a, signal.SIGKILL)
    assert await _wait_for(lambda: sup.pid("a") not in (None, pid_a))
    assert sup.restarts("a") == 1 and sup.restarts("b") == 0
    pids = [sup.pid("a"), sup.pid("b")]
    await sup.stop()
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        assert not alive, f"pid {pid} still running after stop()"
    assert any("exited with -9" in e for e in events)


async def test_child_without_restart_stays_down(tmp_path):
    sup = Supervisor(tmp_path / "logs", backoff_initial_s=0.05)
    await sup.start_child(ChildSpec("once", [sys.executable, "-c", "print('hi')"], restart=False))
    assert await _wait_for(lambda: sup.pid("once") is None)
    await asyncio.sleep(0.2)
    assert sup.restarts("once") == 0
    await sup.stop()
    assert "hi" in (tmp_path / "logs" / "once.log").read_text()
