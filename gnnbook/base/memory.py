"""Measure the peak memory of a block of code, on the CPU or a GPU.

Book: 1.2.1 why GNN training gets large (measured peak memory).

Used in: chapters/01_introduction.ipynb, chapters/04_gnn_training.ipynb,
chapters/05g_historical_embeddings.ipynb, chapters/09_outlook.ipynb, labs/lab04_minibatch.ipynb,
labs/lab10_recommendation.ipynb, labs/lab11_spatiotemporal_index_batching.ipynb.

On Linux the kernel tracks the process's resident-set high-water mark
(``VmHWM``) and lets a process reset it (``/proc/self/clear_refs``), so the
peak of any piece of code can be read exactly, whatever allocator made it.
Elsewhere a sampling thread watches the RSS.  On a GPU, torch's own counters
are used.

Example:
    >>> import numpy as np
    >>> with PeakMemory() as peak:
    ...     block = np.ones(50_000_000, dtype=np.uint8)  # 50 MB, touched
    >>> peak.peak_bytes > 40e6
    True
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

import psutil

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(*fields: str) -> int | None:
    """Sum of ``fields`` (kB lines such as ``VmHWM``) of /proc/self/status; None off Linux."""
    try:
        lines = _STATUS.read_text().splitlines()
    except OSError:
        return None
    values = dict(line.split(":", 1) for line in lines if ":" in line)
    if not all(field in values for field in fields):
        return None
    return sum(int(values[field].split()[0]) * 1024 for field in fields)


def _vm_hwm_bytes() -> int | None:
    return _status_bytes("VmHWM")


def _file_backed_bytes() -> int:
    return _status_bytes("RssFile") or 0


def _reset_hwm() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


_LIBC = _libc()
_M_MMAP_THRESHOLD = -3  # mallopt parameter number in glibc's malloc.h


def release_free_memory() -> None:
    """Hand free heap pages back to the OS (glibc ``malloc_trim``; no-op elsewhere)."""
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


def track_freed_memory(threshold_bytes: int = 1 << 20) -> bool:
    """Make resident memory follow live tensors (Linux/glibc), for measuring.

    glibc keeps freed blocks to reuse them, so a new tensor can land in pages
    that are already resident and :class:`PeakMemory` would see ~0 bytes.
    Giving every block of at least ``threshold_bytes`` its own mapping (freed
    straight back to the OS) fixes that, at the price of a page fault per big
    allocation: call it in notebooks that measure memory, not for speed runs.
    Returns False where the C library has no ``mallopt``.
    """
    if _LIBC is None or not hasattr(_LIBC, "mallopt"):
        return False
    ok = bool(_LIBC.mallopt(_M_MMAP_THRESHOLD, int(threshold_bytes)))
    release_free_memory()
    return ok


def exact_memory_unavailable_reason() -> str | None:
    """Why memory peaks cannot be measured exactly in this process, or None
    when they can (Linux's resettable high-water mark and glibc's ``mallopt``)."""
    reasons = []
    if _LIBC is None or not hasattr(_LIBC, "mallopt"):
        reasons.append("the C library has no mallopt (not glibc), so freed blocks stay resident and "
                       "a new tensor can reuse them without raising resident memory")
    if not (_reset_hwm() and _vm_hwm_bytes() is not None):
        reasons.append("/proc/self has no resettable VmHWM (not Linux, or clear_refs is not writable), "
                       "so peaks come from a sampling thread that can miss short spikes")
    return "; ".join(reasons) or None


def exact_memory_available(skipped: str) -> bool:
    """Whether a notebook's memory checks can run here; when they cannot, print
    which checks are skipped (``skipped``) and why, so that none is skipped silently.

    Calls :func:`track_freed_memory` (resident memory follows live tensors), so
    it can be the first memory call of a notebook.  The course's rule: a check
    that needs exact memory runs under ``if exact_memory_available("..."):``,
    and its measured numbers are still shown either way.

    Example:
        >>> if exact_memory_available("the Adam-state memory check"):
        ...     pass  # assert on PeakMemory's numbers here
    """
    reason = exact_memory_unavailable_reason()
    if reason is None and track_freed_memory():
        return True
    print(f"SKIPPED: {skipped}, because exact memory measurement is unavailable here: "
          f"{reason or 'glibc refused mallopt(M_MMAP_THRESHOLD)'}. The numbers above are shown but not checked.")
    return False


def current_rss() -> int:
    """Resident set size: data, plus the pages of code and mapped files in use."""
    return psutil.Process(os.getpid()).memory_info().rss


def resident_data_bytes() -> int:
    """Resident memory that holds data (anonymous + shared memory), without the
    pages of shared libraries: running a torch kernel for the first time, or
    again after the kernel evicted its code pages under memory pressure, faults
    in megabytes of code that are not tensors.  Falls back to the RSS off Linux.
    """
    data = _status_bytes("RssAnon", "RssShmem")
    return data if data is not None else current_rss()


class PeakMemory:
    """Context manager: ``peak_bytes`` is how far memory rose above its level at
    entry (CPU resident memory, or GPU memory when ``device`` is CUDA).

    On Linux, code and file pages faulted in during the block are not counted
    (see :func:`resident_data_bytes`): the peak is the block's data.
    """

    def __init__(self, device: str = "cpu", interval: float = 0.001):
        self.device = str(device)
        self.interval = interval
        self.peak_bytes = 0

    def __enter__(self) -> "PeakMemory":
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            return self
        release_free_memory()
        # Reset first, then read the base: memory freed in between (another
        # thread, the garbage collector) must not hide the peak that follows.
        self._use_hwm = _reset_hwm() and _vm_hwm_bytes() is not None
        self._base = _vm_hwm_bytes() if self._use_hwm else current_rss()
        self._file_base = _file_backed_bytes()
        if not self._use_hwm:
            self._max = self._base
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._max = max(self._max, current_rss())

    def __exit__(self, *exc) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device) - self._base
            return
        if self._use_hwm:
            top = _vm_hwm_bytes() or self._base
        else:
            self._stop.set()
            self._thread.join()
            top = max(self._max, current_rss())
        # Pages of code faulted in meanwhile raised the high-water mark too;
        # they are still resident at exit, so their growth is subtracted.
        code_pages = max(0, _file_backed_bytes() - self._file_base)
        self.peak_bytes = max(0, top - self._base - code_pages)
