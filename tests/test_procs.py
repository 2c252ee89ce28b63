"""gnnbook.base.procs: fail fast, deadline, nothing left behind (even when the
supervisor itself is killed), stack dumps of a hang."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gnnbook.base.procs import ProcessFailed, ProcessGroup
from shm_probe import shm_mapped_by  # tests/ is on sys.path under pytest

PY = sys.executable


def _descendants() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_success_returns_exit_codes(tmp_path):
    with ProcessGroup(deadline_s=30, log_dir=tmp_path) as group:
        group.start("a", [PY, "-c", "print('hello from a')"])
        group.start("b", [PY, "-c", "print('hello from b')"])
        assert group.wait() == {"a": 0, "b": 0}
        assert "hello from a" in group.log("a")


def test_first_failure_kills_the_group_and_names_the_process(tmp_path):
    start = time.monotonic()
    with pytest.raises(ProcessFailed) as info:
        with ProcessGroup(deadline_s=60, log_dir=tmp_path) as group:
            group.start("server", [PY, "-c", "import time; time.sleep(600)"], background=True)
            group.start("trainer-0", [PY, "-c", "import time; time.sleep(600)"])
            group.start("trainer-1", [PY, "-c", "import sys, time; time.sleep(0.5); print('boom'); sys.exit(3)"])
            group.wait()
    assert time.monotonic() - start < 15
    assert info.value.name == "trainer-1" and info.value.returncode == 3
    assert "boom" in str(info.value) and "trainer-1" in str(info.value)
    assert not _descendants()


def test_a_killed_process_is_reported_by_signal(tmp_path):
    with pytest.raises(ProcessFailed, match="killed by SIGKILL"):
        with ProcessGroup(deadline_s=60, log_dir=tmp_path) as group:
            victim = group.start("victim", [PY, "-c", "import time; time.sleep(600)"])
            time.sleep(0.3)
            victim.kill()
            group.wait()
    assert not _descendants()


def test_deadline_stops_a_hang_and_its_grandchildren(tmp_path):
    script = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
              "time.sleep(600)")
    start = time.monotonic()
    with pytest.raises(ProcessFailed, match="deadline of 2 s passed; still running: hang"):
        with ProcessGroup(deadline_s=2, log_dir=tmp_path) as group:
            group.start("hang", [PY, "-c", script])
            group.wait()
    assert time.monotonic() - start < 10
    time.sleep(0.2)
    assert not _descendants(), "the grandchild in the same session is killed too"


def test_background_servers_get_stopped_after_foreground_finishes():
    with ProcessGroup(deadline_s=30, grace_s=0.5) as group:
        temporary_logs = group.log_dir
        group.start("server", [PY, "-c", "import time; time.sleep(600)"], background=True)
        group.start("client", [PY, "-c", "pass"])
        codes = group.wait()
    assert codes["client"] == 0 and codes["server"] != 0
    assert not _descendants()
    assert not temporary_logs.exists(), "a group that ended well leaves no gnnbook-job-* folder"


# --- the supervisor itself killed; grandchildren that escaped the process group ---

def _procs_with(text: str) -> list[int]:
    """Live processes whose environment mentions ``text`` (read here, not by gnnbook)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and any(text in f"{k}={v}" for k, v in proc.environ().items()):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


# A member that leaves a grandchild in a session of its own (out of reach of
# killpg) and holds a multiprocessing semaphore (/dev/shm/sem.mp-*, freed by
# nobody once its resource tracker is killed).
MEMBER = """
import multiprocessing as mp, os, subprocess, sys, time
lock = mp.get_context("spawn").Lock()
subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"])
print("ready", flush=True)
time.sleep(600)
"""
SUPERVISOR = """
import sys, time
from gnnbook.base.procs import ProcessGroup
group = ProcessGroup(60, log_dir=sys.argv[1], on_cleanup=lambda: open(sys.argv[1] + "/cleaned", "w").close())
with group:
    group.start("member", [sys.executable, "-c", sys.argv[2]])
    print(group.tag, flush=True)
    group.wait()
"""


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_killed_supervisor_leaves_no_process_and_no_segment(tmp_path, sig):
    parent = subprocess.Popen([PY, "-c", SUPERVISOR, str(tmp_path), MEMBER], stdout=subprocess.PIPE, text=True)
    try:
        tag = parent.stdout.readline().strip()
        end = time.monotonic() + 30
        while "ready" not in (tmp_path / "member.log").read_text() and time.monotonic() < end:
            time.sleep(0.1)
        pids = _procs_with(tag)
        shm = shm_mapped_by(pids)
        assert len(pids) >= 3 and any(s.startswith("sem.mp-") for s in shm), (pids, shm)  # member, tracker, grandchild
        time.sleep(3.0)  # the watchdog records the job's segments every second (late under load)
        os.kill(parent.pid, getattr(signal, sig))
        parent.wait(10)
        killed = time.monotonic()
        def left():  # the watchdog kills the processes first, then removes the segments
            return _procs_with(tag), [s for s in shm if (Path("/dev/shm") / s).exists()]

        while any(left()) and time.monotonic() - killed < 10:
            time.sleep(0.2)
        assert left() == ([], []), f"processes and segments of the job left 10 s after {sig} of its supervisor"
        assert parent.returncode == -getattr(signal, sig)  # SIGTERM: cleaned up, then died of it
        assert (tmp_path / "cleaned").exists() == (sig == "SIGTERM")
    finally:
        parent.kill()
        for pid in _procs_with(tag) if "tag" in locals() and tag else []:
            os.kill(pid, signal.SIGKILL)


def test_a_peer_that_exits_0_does_not_leave_the_others_waiting(tmp_path):
    start = time.monotonic()
    with pytest.raises(ProcessFailed, match="'done' exited with code 0 but waiting still ran 1 s later"):
        with ProcessGroup(deadline_s=60, peer_exit_grace_s=1, log_dir=tmp_path) as group:
            group.start("done", [PY, "-c", "pass"])
            group.start("waiting", [PY, "-c", "import time; time.sleep(600)"])
            group.wait()
    assert time.monotonic() - start < 10
    assert not _descendants()


HANG = """
import faulthandler, signal, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
def stuck_in_here():
    time.sleep(600)
print("hanging", flush=True)
stuck_in_here()
"""


def test_a_hang_dumps_its_stack_before_it_is_killed(tmp_path):
    with pytest.raises(ProcessFailed, match="deadline of 3 s passed") as failure:
        with ProcessGroup(deadline_s=3, log_dir=tmp_path) as group:
            group.start("hang", [PY, "-c", HANG])
            group.start("plain", [PY, "-c", "import time; time.sleep(600)"])  # no handler: not signalled
            group.wait()
    log = (tmp_path / "hang.log").read_text()
    assert "hanging" in log and "in stuck_in_here" in log, log
    assert "stuck_in_here" in str(failure.value)
    assert group.members[1].popen.returncode in (-signal.SIGTERM, -signal.SIGKILL)


def test_a_server_that_exits_early_dumps_the_stacks_of_the_processes_left(tmp_path):
    """The server-exit path (issue 22, item 14): the trainers left waiting show where they wait."""
    with pytest.raises(ProcessFailed, match="'server' exited with code 0 while trainer still ran"):
        with ProcessGroup(deadline_s=60, log_dir=tmp_path, background_exit_grace_s=1) as group:
            group.start("server", [PY, "-c", "pass"], background=True)
            group.start("trainer", [PY, "-c", HANG])
            group.wait()
    log = (tmp_path / "trainer.log").read_text()
    assert "hanging" in log and "in stuck_in_here" in log, log
