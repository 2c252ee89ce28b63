"""gnnbook.base.budget: a machine's hard memory limit and its measured peak (issue 24)."""
import subprocess
import sys
import time

import pytest

from gnnbook.base.budget import MemoryBudget, cgroup_support, format_gib, parse_bytes

MODE, WHY = cgroup_support()
enforced = pytest.mark.skipif(MODE == "measured", reason=f"no memory cgroup can be made here: {WHY}")
ALLOCATE = "import sys, time; b = bytearray(int(sys.argv[1])); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.5)"


def test_sizes_read_and_written():
    assert parse_bytes("2GiB") == 2 * 2**30 and parse_bytes("1.5G") == int(1.5 * 2**30)
    assert parse_bytes("2GB") == 2 * 10**9 and parse_bytes("300MiB") == 300 * 2**20
    with pytest.raises(ValueError, match="2GiB"):
        parse_bytes("two gigs")
    assert format_gib(2 * 2**30) == "2.0 GiB" and format_gib(300 * 2**20) == "300 MiB"


@enforced
def test_a_process_over_its_budget_is_killed_and_reported_by_name():
    with MemoryBudget("machine 1", "64MiB") as budget:
        proc = subprocess.Popen([sys.executable, "-c", ALLOCATE, str(200 * 2**20)], preexec_fn=budget.join)
        proc.wait(60)
        report = budget.report()
    assert proc.returncode == -9, "the kernel kills a machine over its hard limit"
    assert report.exceeded and report.oom_kills >= 1
    assert report.message().startswith("machine 1 exceeded its 64 MiB budget (peak ")
    assert "killed by the kernel" in report.message()


@enforced
def test_a_process_within_its_budget_runs_and_its_peak_is_measured():
    with MemoryBudget("machine 0", "256MiB") as budget:
        proc = subprocess.Popen([sys.executable, "-c", ALLOCATE, str(100 * 2**20)], preexec_fn=budget.join)
        assert proc.wait(60) == 0
        report = budget.report()
    assert not report.exceeded
    assert 100 * 2**20 <= report.peak_bytes <= 256 * 2**20, format_gib(report.peak_bytes)
    assert "stayed within its 256 MiB budget" in report.message()


def test_measured_mode_sums_the_processes_peaks_without_enforcing():
    budget = MemoryBudget("machine 2", "64MiB", mode="measured")
    procs = [subprocess.Popen([sys.executable, "-c", ALLOCATE.replace("0.5", "3"), str(80 * 2**20)])
             for _ in range(2)]
    for p in procs:
        budget.add(p.pid)
    time.sleep(2.0)
    budget.sample()
    for p in procs:
        assert p.wait(60) == 0, "measured mode does not enforce"
    report = budget.report()
    assert report.peak_bytes >= 2 * 80 * 2**20 and report.exceeded
    assert "measured, not enforced" in report.message()
