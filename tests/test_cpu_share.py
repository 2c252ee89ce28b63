"""CpuShare counts the cores other processes held while a block ran (what 5a's pipelining claim needs)."""
import os
import subprocess
import sys
import time

from gnnbook.base.cpu_share import CpuShare, usable_cores

SPIN = "import time\nend = time.perf_counter() + 1.5\nwhile time.perf_counter() < end: pass\n"


def test_a_busy_process_is_counted_as_another_unless_it_is_watched():
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)  # the interpreter has started and spins
        with CpuShare([os.getpid()]) as unwatched:
            time.sleep(0.5)
        with CpuShare([os.getpid(), spinner.pid]) as watched:
            time.sleep(0.5)
    finally:
        spinner.wait(10)
    # One spinning process holds about one core; the kernel's counters tick every 10 ms.
    assert unwatched.other_cores > 0.6, unwatched.__dict__
    assert watched.other_cores < unwatched.other_cores - 0.5, (watched.__dict__, unwatched.__dict__)
    assert watched.ours_s > 0.3 and unwatched.free_cores <= usable_cores() - 0.6


def test_a_student_process_gets_no_thread_whose_core_a_busy_program_holds():
    from gnnbook.course.grading.engine import free_threads

    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)
        beside_busy = free_threads(0.5)
    finally:
        spinner.wait(10)
    assert 1 <= beside_busy <= max(1, usable_cores() - 1), beside_busy
