"""gnnbook.base.reaper on its own: what it may remove and whom it may signal (issue 22, item 12)."""
import os
import signal
import subprocess
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path

import pytest

from gnnbook.base import reaper
from gnnbook.base.procs import ProcessGroup

PY = sys.executable
# Opens (maps) an existing segment by name and holds it: the job merely uses what someone else made.
OPENER = """
import sys, time
from multiprocessing import shared_memory, resource_tracker
block = shared_memory.SharedMemory(name=sys.argv[1])
resource_tracker.unregister(block._name, "shared_memory")   # an opener must not unlink it at exit either
print("mapped", flush=True)
time.sleep(600)
"""


def wait_for(path: Path, text: str, within_s: float = 30) -> None:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never said {text!r}")


@pytest.mark.parametrize("holder_keeps_it_mapped", [True, False])
def test_a_segment_the_job_merely_opened_survives_the_job(tmp_path, holder_keeps_it_mapped):
    """A psm_ segment made by this (outside) process, mapped by the job, is left in place when the job
    is killed, whether or not its maker still maps it (it existed before the job started)."""
    block = shared_memory.SharedMemory(create=True, size=4096)
    try:
        if not holder_keeps_it_mapped:
            block.close()       # still on /dev/shm, mapped by nobody but the job
        with ProcessGroup(60, log_dir=tmp_path) as group:
            group.start("opener", [PY, "-c", OPENER, block.name])
            wait_for(tmp_path / "opener.log", "mapped")
            group.record()
            assert block.name in group.shm, "the job's processes map it: it is recorded"
        assert (Path("/dev/shm") / block.name).exists(), "the job removed a segment it merely opened"
    finally:
        if holder_keeps_it_mapped:
            block.close()
        block.unlink()


def test_a_segment_the_job_made_is_removed_with_it(tmp_path):
    maker = ("import time\nfrom multiprocessing import shared_memory\n"
             "b = shared_memory.SharedMemory(create=True, size=4096)\nprint(b.name, flush=True)\ntime.sleep(600)\n")
    with ProcessGroup(60, log_dir=tmp_path) as group:
        group.start("maker", [PY, "-c", maker])
        wait_for(tmp_path / "maker.log", "psm_")
        name = (tmp_path / "maker.log").read_text().split()[0]
    assert not (Path("/dev/shm") / name).exists(), "a segment the job made outlived it"


def test_the_watchdog_leaves_what_existed_before_the_job(tmp_path):
    """The sweep after a dead supervisor: a pre-existing segment that the job mapped stays."""
    block = shared_memory.SharedMemory(create=True, size=4096)
    block.close()
    supervisor = (
        "import sys, time\nfrom gnnbook.base.procs import ProcessGroup\n"
        "g = ProcessGroup(120, log_dir=sys.argv[1])\n"
        "g.start('opener', [sys.executable, '-c', sys.argv[2], sys.argv[3]])\nprint(g.tag, flush=True)\ng.wait()\n")
    parent = subprocess.Popen([PY, "-c", supervisor, str(tmp_path), OPENER, block.name], stdout=subprocess.PIPE,
                              text=True)
    try:
        tag = parent.stdout.readline().strip()
        wait_for(tmp_path / "opener.log", "mapped")
        time.sleep(2.5)                       # the watchdog records mapped segments every second
        parent.kill()
        parent.wait(10)
        end = time.monotonic() + 15
        while reaper.job_pids(tag) and time.monotonic() < end:
            time.sleep(0.2)
        time.sleep(1.0)
        assert not reaper.job_pids(tag)
        assert (Path("/dev/shm") / block.name).exists(), "the watchdog removed a segment the job merely opened"
    finally:
        parent.kill()
        block.unlink()


# A job's first process makes a segment while the watchdog has not yet got going (stopped here, as a
# busy machine would delay its interpreter), and nobody but the watchdog would remove it.
LATE_WATCHDOG = """
import os, signal, sys, time
from gnnbook.base.procs import ProcessGroup
g = ProcessGroup(120, log_dir=sys.argv[1])
g.arm()
os.kill(g.watchdog.popen.pid, signal.SIGSTOP)
g.start("maker", [sys.executable, "-c", sys.argv[2]])
log = os.path.join(sys.argv[1], "maker.log")
while "psm_" not in (open(log).read() if os.path.exists(log) else ""):
    time.sleep(0.05)
os.kill(g.watchdog.popen.pid, signal.SIGCONT)
print(g.tag, flush=True)
g.wait()
"""
MAKER = """
import time
from multiprocessing import shared_memory, resource_tracker
b = shared_memory.SharedMemory(create=True, size=4096)
resource_tracker.unregister(b._name, "shared_memory")   # only the watchdog may remove it
print(b.name, flush=True)
time.sleep(600)
"""


def test_a_segment_made_before_the_watchdog_got_going_is_still_the_jobs(tmp_path):
    """What /dev/shm held before the job is the supervisor's snapshot, taken before the first process:
    the watchdog's own, taken when its interpreter starts, can come after the job made a segment
    (CI once found a job's sem.mp-* left this way after its supervisor was killed)."""
    parent = subprocess.Popen([PY, "-c", LATE_WATCHDOG, str(tmp_path), MAKER], stdout=subprocess.PIPE, text=True)
    name = None
    try:
        tag = parent.stdout.readline().strip()
        name = (tmp_path / "maker.log").read_text().split()[0]
        time.sleep(2.5)                       # the watchdog records mapped segments every second
        parent.kill()
        parent.wait(10)
        end = time.monotonic() + 15
        while ((Path("/dev/shm") / name).exists() or reaper.job_pids(tag)) and time.monotonic() < end:
            time.sleep(0.2)
        assert not (Path("/dev/shm") / name).exists(), "the job's segment outlived its killed supervisor"
    finally:
        parent.kill()
        if name and (Path("/dev/shm") / name).exists():
            (Path("/dev/shm") / name).unlink()


def test_kill_signals_no_process_group_of_a_member_reaped_before(tmp_path, monkeypatch):
    """A member that exited and was reaped long ago may have handed its pid to someone else's new
    process group: kill() must not killpg it (issue 22, item 12)."""
    signalled = []
    real_killpg = os.killpg
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: (signalled.append((pgid, sig)), real_killpg(pgid, sig)))
    with ProcessGroup(60, log_dir=tmp_path) as group:
        quick = group.start("quick", [PY, "-c", "pass"])
        slow = group.start("slow", [PY, "-c", "import time; time.sleep(600)"])
        quick.wait(30)
        time.sleep(0.2)
        group.kill()
    assert all(pgid != quick.pid for pgid, _ in signalled), f"killpg of a reaped member's pid: {signalled}"
    assert any(pgid == slow.pid for pgid, _ in signalled), "the running member's group was signalled"


def test_group_holds_job_process_reads_the_process_group(tmp_path):
    with ProcessGroup(60, log_dir=tmp_path) as group:
        member = group.start("sleeper", [PY, "-c", "import time; time.sleep(600)"])
        time.sleep(0.3)
        assert reaper.group_holds_job_process(member.pid, group.tag)
        assert not reaper.group_holds_job_process(os.getpgrp(), group.tag)
        os.kill(member.pid, signal.SIGKILL)
        member.wait(10)
        assert not reaper.group_holds_job_process(member.pid, group.tag)


def test_stale_segment_sweep_spares_a_segment_a_live_process_maps():
    """Issue 22, item 11: a tag whose pid is not alive here (a launcher in another PID namespace)
    does not make a mapped segment stale; once nothing maps it, it goes."""
    import itertools

    from gnnbook.distributed.emulation import remove_stale_segments

    dead = next(pid for pid in itertools.count(4_000_000) if not Path(f"/proc/{pid}").exists())
    segment = Path("/dev/shm") / f"gnnbook{dead}x0abcdem0_probe"
    segment.write_bytes(b"\0" * 4096)
    holder = subprocess.Popen([sys.executable, "-c", "import mmap, sys, time; f = open(sys.argv[1], 'r+b'); "
                               "m = mmap.mmap(f.fileno(), 4096); print('mapped', flush=True); time.sleep(60)",
                               str(segment)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "mapped"
        assert segment.name not in remove_stale_segments() and segment.exists()
    finally:
        holder.kill()
        holder.wait(10)
    try:
        assert segment.name in remove_stale_segments() and not segment.exists()
    finally:
        segment.unlink(missing_ok=True)
