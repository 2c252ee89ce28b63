"""What the distributed jobs this process started left behind: processes and shared memory.

Book: 8.3 distributed training (nothing left behind).

Used in: chapters/08_dgl_practice.ipynb.

A job that ends cleanly leaves nothing: no process of it still running, no
shared-memory segment of it in ``/dev/shm``.  Chapter 8 and lab 8 check this
after every job.  Only what belongs to *this* process counts: its own child
processes, and the segments whose job tag names this process as the
supervisor (:func:`gnnbook.distributed.emulation.new_job_tag` puts the
supervising process id in every tag), so jobs of other users of the machine,
running at the same time, are never mistaken for ours.

Example:
    >>> found = leftovers()
    >>> found.processes, found.segments
    ([], [])
    >>> bool(found)
    False
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import psutil

from . import emulation


@dataclass
class Leftovers:
    """Process ids still running and shared-memory segment names still present."""

    processes: list[int] = field(default_factory=list)
    segments: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.segments)

    def __str__(self) -> str:
        if not self:
            return "nothing left behind"
        return f"left processes {self.processes} and shared-memory segments {self.segments}"


def own_job_prefix(pid: int | None = None) -> str:
    """The start of every job tag (and shared-memory name) of jobs supervised by ``pid``."""
    return f"gnnbook{os.getpid() if pid is None else pid}x"


def leftovers() -> Leftovers:
    """Child processes of this process still alive, and segments of its jobs still in ``/dev/shm``."""
    processes = [p.pid for p in psutil.Process().children(recursive=True) if p.is_running()]
    shm = emulation.SHM_DIR
    prefix = own_job_prefix()
    segments = sorted(p.name for p in shm.iterdir() if p.name.startswith(prefix)) if shm.is_dir() else []
    return Leftovers(processes, segments)
