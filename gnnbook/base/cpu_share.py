"""How many of this machine's cores other processes took while a piece of work ran.

Book: 5.2.1 operator parallelism across minibatches (whether a pipeline's stages had a core each).

Used in: chapters/05a_minibatch_training_and_sampling.ipynb.

A two-stage pipeline on two cores only overlaps its stages when nothing else wants those cores.
Whether that was so is measured, not assumed: the CPU time every process of the machine used
during the work (the kernel's counters, ``psutil.cpu_times``; steal time counts, it is a core a
hypervisor gave to someone else) minus the CPU time of the processes that did the work, divided
by the wall time, is the number of cores other processes held meanwhile.

Example:
    >>> import os, time
    >>> with CpuShare([os.getpid()]) as share:
    ...     time.sleep(0.2)
    >>> share.wall_s >= 0.2 and share.other_cores >= 0.0
    True
"""
from __future__ import annotations

import os
import time
from typing import Sequence

import psutil


def _busy_seconds() -> float:
    """CPU seconds every process of the machine has used, all cores together (idle and iowait excluded)."""
    t = psutil.cpu_times()
    return sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


def _process_seconds(pid: int) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return t.user + t.system


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cores_left(other_cores: float) -> float:
    """The usable cores that processes holding ``other_cores`` cores on average left free."""
    return max(0.0, min(usable_cores(), psutil.cpu_count() or 1) - other_cores)


class CpuShare:
    """A context manager: ``other_cores``, the cores that processes other than ``pids`` held on
    average while the block ran, and ``free_cores``, what was left of :func:`usable_cores`.

    A process of ``pids`` that exits inside the block has its CPU time after the start lost (it
    counts as another process's): watch processes that outlive the block."""

    def __init__(self, pids: Sequence[int]):
        self.pids = list(pids)
        self.wall_s = self.busy_s = self.ours_s = 0.0

    def __enter__(self) -> "CpuShare":
        self._start = (time.perf_counter(), _busy_seconds(), sum(map(_process_seconds, self.pids)))
        return self

    def __exit__(self, *exc) -> None:
        wall, busy, ours = self._start
        self.wall_s = time.perf_counter() - wall
        self.busy_s = _busy_seconds() - busy
        self.ours_s = sum(map(_process_seconds, self.pids)) - ours

    @property
    def other_cores(self) -> float:
        """Cores held by other processes, on average over the block (never below 0: the two clocks tick
        at different granularities)."""
        return max(0.0, self.busy_s - self.ours_s) / max(self.wall_s, 1e-9)

    @property
    def free_cores(self) -> float:
        """The usable cores that no other process held, on average over the block."""
        return cores_left(self.other_cores)
