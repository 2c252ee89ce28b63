"""Lab 11's checks (``labs/lab11_spatiotemporal_index_batching.ipynb``): windows as index ranges, and the memory they
save.

Book: none (industry lab; ockerman2025pgti, zhao2019tgcn).

Used in: labs/lab11_spatiotemporal_index_batching.ipynb.

:func:`check_windows` sends series, window sizes and ranges of its own (the Los-loop training windows,
random series) to the student's ``MyIndexDataset`` (in the autograder a sandboxed process, here the
notebook) and compares every window it asked for, and every batch of an epoch, with the package's
materialised ``SnapshotDataset``, built here; the student's process also reports whether the windows are
views of the series and which error an index out of range raises.  :func:`check_epoch_peak` gives the
student's ``epoch_peak`` loaders whose memory it knows (sizes drawn when grading), and measures, with the
course's own peak measurement in the student's process, one epoch of materialised windows against one
of the student's index windows.

Example:
    >>> check_windows(Here(globals()))             # doctest: +SKIP
    {'series': 2}
"""
from __future__ import annotations

import secrets
from typing import Any

import torch

from ...applications.temporal import SnapshotDataset, batch_order, split_series
from ...data import load_traffic
from ..vetting import Policy
from .engine import Check
from .student import LAB11_PRELUDE, Here

__all__ = ["CHECKS", "Here", "POLICY", "PRELUDE", "check_epoch_peak", "check_windows"]

PRELUDE = LAB11_PRELUDE
POLICY = Policy(modules=("torch", "math"), references=("IndexDataset", "SnapshotDataset", "nbytes"))
MiB = 2 ** 20


def _los_loop() -> tuple[torch.Tensor, int]:
    split = split_series(load_traffic("los-loop").speed, 12, 12)
    return split.series, split.train_stop


def check_windows(student, thorough: bool = False) -> dict[str, Any]:
    """Task 1: every window asked for and every batch of an epoch equal the materialised ones, the windows are
    views of the series (no copy), and an index out of range raises IndexError; on the Los-loop training windows
    and on series, windows and ranges of the check's own."""
    series, stop = _los_loop()
    generator = torch.Generator().manual_seed(3)
    cases = [(series, 12, 12, 0, stop), (torch.randn(60, 5, generator=generator), 4, 3, 7, 50)]
    if thorough:
        cases += [(torch.randn(40, 3, generator=generator), 1, 1, 13, 40),
                  (torch.randn(33, 2, generator=generator), 5, 9, 0, None)]
    calls, expected = [], []
    for data, p, h, start, end in cases:
        snapshots = SnapshotDataset(data, p, h, start, end)
        n = len(snapshots)
        order = batch_order(n, min(64, max(2, n // 3)), epoch=0, seed=0)
        indices = sorted({0, 1, n // 2, n - 1, -1, -n})
        calls.append(("lab11.windows", {"series": data, "past": p, "horizon": h, "start": start, "stop": end,
                                        "indices": indices, "order": order}))
        expected.append((n, [snapshots[i] for i in indices], [snapshots.batch(b) for b in order]))
    for (data, p, h, start, end), (n, windows, batches), reply in zip(cases, expected, student.run(calls)):
        where = f"past={p}, horizon={h}, steps {start}..{data.shape[0] if end is None else end} of {data.shape[0]}"
        assert reply["len"] == n, f"{where}: {reply['len']} windows, expected {n}"
        for i, (x, y), (mx, my) in zip(sorted({0, 1, n // 2, n - 1, -1, -n}), windows, reply["windows"]):
            assert torch.equal(mx, x) and torch.equal(my, y), f"{where}: window {i} differs"
        assert reply["views"], f"{where}: return slices of self.series (views), not copies"
        for i, raised in zip((n, -n - 1), reply["out_of_range"]):
            assert raised == "IndexError", f"{where}: index {i} is out of range and must raise IndexError, got " \
                                           f"{raised or 'no error'}"
        same = len(reply["batches"]) == len(batches) and all(
            torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(reply["batches"], batches))
        assert same, f"{where}: your batches differ from the materialised ones"
    return {"series": len(cases)}


def check_epoch_peak(student, thorough: bool = False) -> dict[str, Any]:
    """Task 2: the student's ``epoch_peak`` measures what a loader adds (loaders of the check's own that hold and
    make known sizes), and one epoch of the student's index windows (Los-loop, 12 + 12 steps, batches of 64) adds
    at least 80% less memory than the materialised windows, both measured by the course's own code."""
    ballasts = [(48 * MiB, 4 * MiB)] + ([((20 + secrets.randbelow(70)) * MiB, 2 * MiB)] if thorough else [])
    series, stop = _los_loop()
    (measured,) = student.run([("lab11.epoch_peaks", {"ballasts": ballasts, "series": series, "stop": stop})])
    if measured["not_exact"]:
        message = f"not graded here: exact memory measurement is unavailable ({measured['not_exact']})"
        if thorough:
            raise AssertionError(message)
        print(f"SKIPPED: {message}; the numbers are shown but not checked")
        return measured
    for (held, per_batch), peak in zip(ballasts, measured["known"]):
        assert held + 0.9 * per_batch <= peak <= held + 3 * per_batch + 16 * MiB, (
            f"a loader that holds {held / MiB:.0f} MiB and makes {per_batch / MiB:.0f} MiB per batch: your epoch_peak "
            f"says {peak / MiB:.1f} MiB; measure in one PeakMemory block: build the dataset, draw every batch")
    peaks = measured["peaks"]
    saving = 1 - peaks["index (yours)"] / peaks["materialised"]
    assert saving >= 0.8, f"only {saving:.1%} less than the materialised windows: slice views, do not copy the series"
    return measured | {"saving": saving}


CHECKS = (Check(1, "windows and batches equal the materialised ones, as views of the series", check_windows),
          Check(2, "epoch_peak measures what a loader adds; index windows need at least 80% less memory",
                check_epoch_peak))
