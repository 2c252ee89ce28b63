"""Lab 12's checks (``labs/lab12_feature_loading.ipynb``): a gather into a reused buffer, and a zero-copy read's PCIe
lines.

Book: none (industry lab; feature loading as in 5.3 and min2021pytorchdirect).

Used in: labs/lab12_feature_loading.ipynb.

:func:`check_gather` makes feature tables and batches of its own and asks the student's
``my_gather_into(features, ids, staging)`` (in the autograder a sandboxed process, here the notebook)
for the rows, the staging buffer after the call and what the call allocated (torch's profiler, in the
student's process, where the vetting refuses any patching of it); the rows must be ``features[ids]``
and must *be in the buffer*.  :func:`check_pcie_lines` compares ``my_pcie_lines(ids, width, itemsize)``
with an enumeration of every byte of every row, done here.

Example:
    >>> lines_by_enumeration(torch.tensor([1]), width=40, itemsize=4)   # bytes 160..319: lines 1 and 2
    2
    >>> check_pcie_lines(Here(globals()))                              # doctest: +SKIP
    {'cases': 16}
"""
from __future__ import annotations

from typing import Any

import torch

from ..vetting import Policy
from .engine import Check
from .student import LAB12_PRELUDE, Here

__all__ = ["CHECKS", "Here", "POLICY", "PRELUDE", "check_gather", "check_pcie_lines", "lines_by_enumeration"]

PRELUDE = LAB12_PRELUDE
POLICY = Policy(modules=("torch", "math", "numpy"), references=("gather_into", "pcie_lines", "zero_copy_gather",
                                                                 "pinned_to_device", "gather_pinned_tensor_rows"))
LINE_BYTES = 128


def check_gather(student, thorough: bool = False) -> dict[str, Any]:
    """Task 1: the rows ``features[ids]``, written into the staging buffer and returned as its first ``len(ids)``
    rows, with (almost) nothing allocated; the buffer reused; a batch larger than the buffer refused."""
    generator = torch.Generator().manual_seed(12)
    cases = [(5000, 256, torch.float32, 3000)]   # table rows, width, dtype, rows of the batch (drawn with repeats)
    if thorough:
        cases += [(777, 100, torch.float32, 500), (64, 3, torch.float64, 64)]
    tables = []
    for num_rows, width, dtype, batch_rows in cases:
        tables.append((torch.rand(num_rows, width, generator=generator, dtype=dtype),
                       torch.randint(num_rows, (batch_rows,), generator=generator)))
    replies = student.run([("lab12.gather", {"features": f, "ids": i, "spare_rows": 7}) for f, i in tables])
    for (num_rows, width, dtype, batch_rows), (features, ids), r in zip(cases, tables, replies):
        where = f"{batch_rows} rows of a {num_rows} x {width} {dtype} table"
        expected = features[ids]
        assert isinstance(r["rows"], torch.Tensor) and r["rows"].shape == expected.shape, \
            f"{where}: return the first len(ids) rows of staging, shape {tuple(expected.shape)}"
        assert torch.equal(r["rows"], expected), f"{where}: the rows differ from features[ids]"
        assert torch.equal(r["staging_head"], expected) and r["is_view"], \
            f"{where}: write the rows into staging and return its first len(ids) rows (a view), not a new tensor"
        bytes_out = expected.numel() * expected.element_size()
        assert r["allocated"] < 0.01 * bytes_out, (
            f"{where}: {r['allocated']} bytes allocated: gather straight into staging (out=)")
        assert r["reused"], f"{where}: the buffer is reused: a second, smaller batch goes into the same rows"
        assert r["too_large"] == "ValueError", \
            (f"{where}: a batch larger than the staging buffer must raise ValueError "
             f"(got {r['too_large'] or 'no error'})")
    return {"tables": len(cases), "allocated": int(replies[-1]["allocated"])}


def lines_by_enumeration(ids: torch.Tensor, width: int, itemsize: int) -> int:
    """The 128-byte lines every byte of every row ``ids`` falls in, counted per row (each row is a request)."""
    row_bytes = width * itemsize
    return sum(len({b // LINE_BYTES for b in range(r * row_bytes, (r + 1) * row_bytes)}) for r in ids.tolist())


def check_pcie_lines(student, thorough: bool = False) -> dict[str, Any]:
    """Task 2: ``my_pcie_lines`` equals the enumeration, for aligned and unaligned widths and item sizes."""
    generator = torch.Generator().manual_seed(128)
    probes = [torch.randint(100_000, (50,), generator=generator), torch.tensor([0, 1, 1, 31, 32, 33, 127])]
    shapes = [(16, 4), (32, 4), (24, 4), (40, 4), (100, 4), (745, 4), (3, 2), (64, 8)]   # width, itemsize
    if thorough:
        probes += [torch.randint(2_000_000, (30,), generator=generator), torch.tensor([], dtype=torch.int64)]
        shapes += [(1, 1), (33, 4), (7, 8), (129, 1), (2048, 4)]
    cases = [(ids, width, itemsize) for ids in probes for width, itemsize in shapes]
    replies = student.run([("lab12.pcie_lines", {"ids": ids, "width": w, "itemsize": s}) for ids, w, s in cases])
    for (ids, width, itemsize), got in zip(cases, replies):
        expected = lines_by_enumeration(ids, width, itemsize)
        assert got == expected, f"{len(ids)} ids, width {width} x {itemsize} B: {got} lines, expected {expected}"
    return {"cases": len(cases)}


CHECKS = (Check(1, "the rows gathered into the staging buffer, nothing allocated on the way", check_gather),
          Check(2, "the PCIe lines of a zero-copy read equal an enumeration of every byte", check_pcie_lines))
