"""Moving a minibatch's feature rows to the device: three paths, measured, and a stated cost model.

Book: 5.4 feature caching and loading (feature rows to the device).

Used in: labs/lab12_feature_loading.ipynb.

A sampled minibatch needs the features of its *input nodes*, rows scattered over a
feature table that lives in host memory.  Three ways to get them onto a GPU:

1. **pageable**: ``features[ids]`` gathers the rows into a fresh (pageable) tensor,
   then ``.to("cuda")`` copies it.  The GPU's copy engine can only read page-locked
   memory, so the CUDA driver first copies pageable data into a pinned staging
   buffer of its own: one extra host memcpy before the DMA.
2. **pinned**: ``torch.index_select(features, 0, ids, out=staging)`` gathers straight
   into a preallocated, pinned buffer (:func:`gather_into`), then
   ``.to("cuda", non_blocking=True)`` DMAs it: no allocation, no extra copy.
3. **zero-copy** (UVA): the feature table itself is pinned in place (``cudaHostRegister``,
   what DGL's ``pin_memory_inplace`` does) and a GPU kernel reads the rows over PCIe
   (DGL's ``gather_pinned_tensor_rows``): the CPU gathers nothing.  Min et al.,
   "Large Graph Convolutional Network Training with GPU-Oriented Data Communication
   Architecture", PVLDB 14(11), 2021, report 65-92% faster multi-GPU training this way.

Without a GPU, the host part of paths 1 and 2 is measured for real
(:func:`pageable_host`, :func:`gather_into`) and the device part is a **model**
(:class:`LoadingModel`): its link bandwidth and latencies are named constants with
their sources, its host terms are fitted to measurements (:func:`fit_host`).  With a
GPU, :func:`measure_device` times all three paths.

The zero-copy kernel is DGL's when the installed DGL is built with CUDA; the
course's DGL from PyPI is not, so the kernel is then a small Triton one
(:func:`triton_gather`; Triton reads pinned host tensors through UVA).

Example:
    >>> features = torch.arange(12.0).reshape(6, 2)
    >>> staging = staging_buffer(4, 2, pin=False)
    >>> gather_into(features, torch.tensor([5, 0]), staging).tolist()
    [[10.0, 11.0], [0.0, 1.0]]
    >>> pcie_lines(torch.tensor([0, 1]), width=16, itemsize=4)   # two 64-byte rows share one 128-byte line
    2
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import torch

from ..comm.topology import LINK_SPECS

PATHS = ("pageable", "pinned", "zero-copy")
LINE_BYTES = 128   # the unit of the model's zero-copy reads: one 128-byte line per request


# --- the host side: gathers -------------------------------------------------------

def _check_ids(features: torch.Tensor, ids: torch.Tensor) -> None:
    if features.dim() != 2:
        raise ValueError(f"features must be a 2-D table [rows, width], got shape {tuple(features.shape)}")
    if ids.dim() != 1 or ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"ids must be a 1-D int64 or int32 tensor of row numbers, got {ids.dtype} "
                         f"shape {tuple(ids.shape)}")


def staging_buffer(rows: int, width: int, dtype: torch.dtype = torch.float32, pin: bool | None = None) -> torch.Tensor:
    """A reusable buffer for up to ``rows`` gathered rows, pinned when ``pin`` (default: when CUDA is usable).

    Example:
        >>> staging_buffer(3, 2, pin=False).shape
        torch.Size([3, 2])
    """
    if rows < 1 or width < 1:
        raise ValueError(f"a staging buffer needs rows >= 1 and width >= 1, got rows={rows}, width={width}")
    pin = torch.cuda.is_available() if pin is None else pin
    if pin and not torch.cuda.is_available():
        raise RuntimeError("pinned (page-locked) memory needs a working CUDA device; pass pin=False on a CPU")
    return torch.empty(rows, width, dtype=dtype, pin_memory=pin)


def gather_into(features: torch.Tensor, ids: torch.Tensor, staging: torch.Tensor) -> torch.Tensor:
    """Rows ``features[ids]`` written into the first ``len(ids)`` rows of ``staging`` (no allocation);
    returns that view of ``staging``.

    Example:
        >>> staging = torch.empty(3, 1)
        >>> out = gather_into(torch.tensor([[1.0], [2.0]]), torch.tensor([1, 1]), staging)
        >>> out.tolist(), out.data_ptr() == staging.data_ptr()
        ([[2.0], [2.0]], True)
    """
    _check_ids(features, ids)
    if staging.dim() != 2 or staging.shape[1] != features.shape[1] or staging.dtype != features.dtype:
        raise ValueError(f"staging {tuple(staging.shape)} {staging.dtype} does not fit rows of width "
                         f"{features.shape[1]} {features.dtype}: make it with staging_buffer(rows, width, dtype)")
    if len(ids) > staging.shape[0]:
        raise ValueError(f"{len(ids)} rows do not fit a staging buffer of {staging.shape[0]}: "
                         "size it for the largest minibatch")
    out = staging[:len(ids)]
    torch.index_select(features, 0, ids, out=out)   # straight into the buffer, no temporary
    return out


def pageable_host(features: torch.Tensor, ids: torch.Tensor, bounce: torch.Tensor) -> torch.Tensor:
    """The host work of the pageable path: gather into a fresh tensor, then the copy into a
    staging buffer that the CUDA driver makes before it can DMA pageable memory (``bounce``
    stands for the driver's buffer).  Returns the fresh tensor.

    Example:
        >>> pageable_host(torch.eye(3), torch.tensor([2]), torch.empty(1, 3)).tolist()
        [[0.0, 0.0, 1.0]]
    """
    _check_ids(features, ids)
    rows = features[ids]                 # a new pageable allocation every minibatch
    bounce[:len(ids)].copy_(rows)        # the driver's extra memcpy into pinned memory
    return rows


def pcie_lines(ids: torch.Tensor, width: int, itemsize: int = 4, line_bytes: int = LINE_BYTES) -> int:
    """How many ``line_bytes`` lines a zero-copy gather of rows ``ids`` touches, for a row-major
    table of ``width`` items of ``itemsize`` bytes starting on a line boundary.  A row that
    starts inside a line or ends inside one costs the whole line; Min et al. align their
    accesses for this reason.  Lines shared by two gathered rows are counted once per row
    (each row is its own request).

    Example:
        >>> pcie_lines(torch.tensor([1]), width=40)   # bytes 160..319: lines 1 and 2
        2
    """
    if width < 1 or itemsize < 1 or line_bytes < 1:
        raise ValueError(f"width, itemsize and line_bytes must be >= 1, got {width}, {itemsize}, {line_bytes}")
    row_bytes = width * itemsize
    start = ids.to(torch.int64) * row_bytes
    first, last = start // line_bytes, (start + row_bytes - 1) // line_bytes
    return int((last - first + 1).sum())


# --- the cost model ----------------------------------------------------------------

PCIE_BYTES_PER_S, PCIE_LATENCY_S = LINK_SPECS["pcie"]   # PCIe 3.0 x16, nominal (gnnbook.comm.topology)


@dataclass(frozen=True)
class LoadingModel:
    """**A model, not a measurement** of the device side of the three paths.

    Link: ``pcie_bytes_per_s`` and ``dma_latency_s`` are PCIe 3.0 x16's nominal effective
    figures (:data:`gnnbook.comm.topology.LINK_SPECS`, the V100 DGX-1 of Min et al.'s era);
    ``launch_s`` is the fixed cost of starting a copy or kernel (a few microseconds, the
    order CUDA documents for a launch).  Replace them with a measured link
    (:meth:`with_link`) on a GPU.  Zero-copy reads whole ``LINE_BYTES`` lines
    (:func:`pcie_lines`) at the link bandwidth.

    Host: ``host[path] = (fixed_s, per_row_s, per_byte_s)`` is the host time of a path's
    gather, fitted to measurements by :func:`fit_host`.

    - pageable  = host["pageable"] + dma_latency + bytes / bandwidth  (driver-staged copy, not overlapped)
    - pinned    = host["pinned"]   + dma_latency + bytes / bandwidth
    - zero-copy = ids copy (dma_latency + 8 B per id) + launch + lines x 128 B / bandwidth

    Example:
        >>> m = LoadingModel(host={"pageable": (1e-5, 2e-8, 4e-10), "pinned": (1e-5, 2e-8, 2e-10)})
        >>> t = m.predict(rows=4000, width=128)
        >>> t["pinned"] < t["pageable"]
        True
    """

    host: dict[str, tuple[float, float, float]]
    pcie_bytes_per_s: float = PCIE_BYTES_PER_S
    dma_latency_s: float = PCIE_LATENCY_S
    launch_s: float = 5e-6
    itemsize: int = 4

    def __post_init__(self):
        missing = {"pageable", "pinned"} - set(self.host)
        if missing:
            raise ValueError(f"the model needs host terms for {sorted(missing)}: fit them with fit_host(...)")
        for name in ("pcie_bytes_per_s",):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("dma_latency_s", "launch_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def with_link(self, bytes_per_s: float, latency_s: float) -> "LoadingModel":
        """The same model with a measured link instead of the nominal one."""
        return replace(self, pcie_bytes_per_s=bytes_per_s, dma_latency_s=latency_s)

    def host_time(self, path: str, rows: int, width: int) -> float:
        fixed, per_row, per_byte = self.host[path]
        return fixed + per_row * rows + per_byte * rows * width * self.itemsize

    def predict(self, rows: int, width: int, ids: torch.Tensor | None = None) -> dict[str, float]:
        """Modelled seconds of each path for ``rows`` rows of ``width`` items (``ids``, when given,
        place the rows for the zero-copy line count; otherwise rows are taken as consecutive)."""
        if rows < 0 or width < 1:
            raise ValueError(f"need rows >= 0 and width >= 1, got rows={rows}, width={width}")
        nbytes = rows * width * self.itemsize
        dma = self.dma_latency_s + nbytes / self.pcie_bytes_per_s
        ids = torch.arange(rows) if ids is None else ids
        lines = pcie_lines(ids, width, self.itemsize)
        zero_copy = (self.dma_latency_s + 8 * rows / self.pcie_bytes_per_s + self.launch_s
                     + lines * LINE_BYTES / self.pcie_bytes_per_s)
        return {"pageable": self.host_time("pageable", rows, width) + dma,
                "pinned": self.host_time("pinned", rows, width) + dma,
                "zero-copy": zero_copy}


def ranking_disagreements(modelled: dict[str, float], measured: dict[str, float], margin: float = 1.25
                           ) -> list[tuple[str, str]]:
    """Pairs ``(faster, slower)`` that the model orders by more than ``margin`` (slower / faster)
    but the measurements order the other way; pairs the model calls close are not judged.

    Example:
        >>> ranking_disagreements({"a": 1.0, "b": 2.0, "c": 2.1}, {"a": 3.0, "b": 2.0, "c": 1.0})
        [('a', 'b'), ('a', 'c')]
    """
    if margin < 1:
        raise ValueError(f"margin is a ratio slower / faster and must be >= 1, got {margin}")
    wrong = []
    paths = [p for p in modelled if p in measured]
    for a in paths:
        for b in paths:
            if modelled[b] > margin * modelled[a] and measured[a] > measured[b]:
                wrong.append((a, b))
    return wrong


def fit_host(samples: Sequence[tuple[int, int, float]], itemsize: int = 4) -> tuple[float, float, float]:
    """Least-squares ``(fixed_s, per_row_s, per_byte_s)``, all >= 0, from measured ``(rows, width, seconds)``.

    Example:
        >>> fit = fit_host([(r, w, 1e-5 + 1e-8 * r + 1e-10 * r * w * 4) for r in (100, 900) for w in (8, 64)])
        >>> [round(v, 12) for v in fit]
        [1e-05, 1e-08, 1e-10]
    """
    if len(samples) < 3:
        raise ValueError(f"fitting three host terms needs at least 3 measurements, got {len(samples)}")
    a = np.array([[1.0, r, r * w * itemsize] for r, w, _ in samples])
    t = np.array([s for _, _, s in samples])
    # scale the columns so that the solver sees numbers of one size; relative errors are what matter
    weight = 1.0 / t
    scale = np.abs(a).max(axis=0)
    coef = _nonnegative_lstsq(a / scale * weight[:, None], t * weight) / scale
    return float(coef[0]), float(coef[1]), float(coef[2])


def _nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # tiny active-set solver: drop the most negative coefficient and solve again (three unknowns)
    active = list(range(a.shape[1]))
    while True:
        coef = np.zeros(a.shape[1])
        coef[active] = np.linalg.lstsq(a[:, active], b, rcond=None)[0]
        if coef.min() >= 0 or len(active) == 1:
            return np.maximum(coef, 0)
        active.remove(int(np.argmin(coef)))


# --- measuring ---------------------------------------------------------------------

def input_node_batches(graph, fanouts: Sequence[int], batch_size: int, num_batches: int, seed: int = 0
                       ) -> list[torch.Tensor]:
    """The input-node ids of the first ``num_batches`` minibatches of DGL's neighbour sampler over
    all nodes as seeds (seeded, shuffled): the rows a step must load."""
    from ..training.minibatch import sample_minibatches

    seeds = torch.arange(graph.num_nodes())
    return [inputs for inputs, _, _ in sample_minibatches(graph, fanouts, batch_size, num_batches, seed, seeds)]


def timings(fn: Callable[[], object], repeats: int, sync: Callable[[], None] | None = None) -> list[float]:
    """``repeats`` wall-clock timings of ``fn()`` (after one warm-up call), ``sync`` run before
    each clock read (``torch.cuda.synchronize`` on a GPU)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    sync = sync or (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return times


def measure_host(features: torch.Tensor, batches: Sequence[torch.Tensor], repeats: int = 7,
                 buffers: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict[str, list[float]]:
    """Seconds per minibatch (over ``batches``) of the host part of the pageable and pinned
    paths, ``repeats`` timings each, the two paths interleaved so that drift hits both.
    ``buffers``: the (staging, bounce) buffers to use, made here when not given."""
    if buffers is None:
        rows = max(len(b) for b in batches)
        buffers = (staging_buffer(rows, features.shape[1], features.dtype, pin=False),
                   staging_buffer(rows, features.shape[1], features.dtype, pin=False))
        for buffer in buffers:
            buffer.zero_()   # touch the pages once, as a long-lived buffer would be
    staging, bounce = buffers
    work = {"pageable": lambda: [pageable_host(features, b, bounce) for b in batches],
            "pinned": lambda: [gather_into(features, b, staging) for b in batches]}
    return _interleaved(work, repeats, len(batches))


_EVICT: torch.Tensor | None = None


def evict_caches(nbytes: int = 64 << 20) -> None:
    """Read ``nbytes`` of other memory, so that the feature rows are no longer in the CPU's
    caches (done before each timing): in training, the model's own work evicts them between steps."""
    global _EVICT
    if _EVICT is None or _EVICT.numel() * 4 < nbytes:
        _EVICT = torch.ones(nbytes // 4)
    _EVICT.sum()   # reads only: no dirty lines left to write back during the timing that follows


def _interleaved(work: dict[str, Callable[[], object]], repeats: int, per: int,
                 sync: Callable[[], None] = lambda: None, cold: bool = True) -> dict[str, list[float]]:
    # every path once to warm up, then round after round of one timing per path
    for fn in work.values():
        fn()
    sync()
    times: dict[str, list[float]] = {p: [] for p in work}
    for _ in range(repeats):
        for path, fn in work.items():
            if cold:
                evict_caches()
            start = time.perf_counter()
            fn()
            sync()
            times[path].append((time.perf_counter() - start) / per)
    return times


def measure_host_grid(batches_by_size: dict[int, list[torch.Tensor]], widths: Sequence[int], num_rows: int,
                      repeats: int = 4, rounds: int = 4, seed: int = 0) -> list[dict]:
    """The host paths over batch sizes x feature widths: one record per size with the mean rows
    per minibatch, the bytes, and each path's fastest time per minibatch (interference from other
    programs only ever adds time) and its timings.  The grid is swept ``rounds`` times, so a burst
    of load elsewhere spoils one sweep of a size, not all its timings.  Feature values are random
    (seeded): a copy's time depends on the bytes, not on the values.

    Example:
        >>> grid = measure_host_grid({2: [torch.tensor([0, 3])]}, [4], num_rows=5, repeats=1, rounds=1)
        >>> grid[0]["rows"], grid[0]["bytes"], grid[0]["pinned"] > 0
        (2.0, 32, True)
    """
    if not batches_by_size or not widths:
        raise ValueError("measure at least one batch size and one width")
    rows = max(len(b) for batches in batches_by_size.values() for b in batches)
    times: dict[tuple[int, int], dict[str, list[float]]] = {}
    for _ in range(rounds):
        # Fresh tables and buffers in every round (the same values): on a virtual machine two
        # allocations of one size can run at different speeds (how the host backs their pages), so
        # the fastest of several allocations is kept.  Within a round every batch size of a width
        # shares them, and runs back to back: a slow spell hits them alike.
        generator = torch.Generator().manual_seed(seed)
        tables = {w: torch.rand(num_rows, w, generator=generator) for w in widths}
        buffers = {w: (torch.zeros(rows, w), torch.zeros(rows, w)) for w in widths}
        for w in widths:
            for size, batches in batches_by_size.items():
                for path, t in measure_host(tables[w], batches, repeats, buffers[w]).items():
                    times.setdefault((size, w), {}).setdefault(path, []).extend(t)
    records = []
    for (size, w), by_path in times.items():
        rows = sum(len(b) for b in batches_by_size[size]) / len(batches_by_size[size])
        records.append({"batch_size": size, "width": w, "rows": rows, "bytes": int(rows * w * 4),
                        **{p: min(t) for p, t in by_path.items()}, "timings": by_path})
    return records


def allocated_bytes(fn: Callable[[], object]) -> int:
    """Bytes of CPU tensors that torch allocated while ``fn()`` ran (torch's profiler), temporaries included.

    Example:
        >>> allocated_bytes(lambda: torch.zeros(1000).add_(1)) >= 4000
        True
    """
    from torch.profiler import ProfilerActivity, profile

    os.environ.setdefault("KINETO_LOG_LEVEL", "5")   # the profiler's stage messages are noise here
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return int(sum(e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage > 0))


def zero_copy_engine() -> str | None:
    """Which zero-copy gather works here: ``"dgl"`` (DGL built with CUDA), ``"triton"``, or None (no GPU)."""
    if not torch.cuda.is_available():
        return None
    try:
        import dgl.utils

        probe = torch.zeros(4, 2)
        handle = dgl.utils.pin_memory_inplace(probe)
        dgl.utils.gather_pinned_tensor_rows(probe, torch.tensor([1], device="cuda"))
        del handle
        return "dgl"
    except Exception:   # DGL from PyPI is a CPU build: no CUDA kernels
        pass
    try:
        import triton  # noqa: F401

        return "triton"
    except ImportError:
        return None


_TRITON_KERNEL = None


def _triton_kernel():
    global _TRITON_KERNEL
    if _TRITON_KERNEL is None:
        from .uva_gather import gather_rows

        _TRITON_KERNEL = gather_rows
    return _TRITON_KERNEL


def triton_gather(features: torch.Tensor, ids: torch.Tensor, out: torch.Tensor | None = None,
                  kernel=None) -> torch.Tensor:
    """``features[ids]`` computed by the Triton kernel of :mod:`gnnbook.ch5_minibatch.uva_gather` on ``ids``'
    device; ``features`` may be pinned host memory (zero-copy).  ``kernel``: another build of
    that kernel (tests pass one made for Triton's CPU interpreter)."""
    _check_ids(features, ids)
    if not features.is_contiguous():
        raise ValueError("the zero-copy kernel reads a row-major table: pass features.contiguous()")
    kernel = kernel or _triton_kernel()
    width = features.shape[1]
    if out is None:
        out = torch.empty(len(ids), width, dtype=features.dtype, device=ids.device)
    if len(ids):
        kernel[(len(ids),)](features, ids, out, width, BLOCK=min(1024, max(16, 1 << (width - 1).bit_length())))
    return out


class PinnedInPlace:
    """Page-lock ``tensor``'s own memory (``cudaHostRegister``, what DGL's ``pin_memory_inplace``
    does) inside a ``with`` block, without copying it; unpinned on exit."""

    def __init__(self, tensor: torch.Tensor):
        if not tensor.is_contiguous() or tensor.device.type != "cpu":
            raise ValueError("pin a contiguous CPU tensor in place")
        if not torch.cuda.is_available():
            raise RuntimeError("pinning memory needs a working CUDA device")
        self.tensor = tensor

    def __enter__(self) -> torch.Tensor:
        nbytes = self.tensor.numel() * self.tensor.element_size()
        status = torch.cuda.cudart().cudaHostRegister(self.tensor.data_ptr(), nbytes, 0)
        if int(status) != 0:
            raise RuntimeError(f"cudaHostRegister failed with CUDA error {int(status)}")
        return self.tensor

    def __exit__(self, *exc) -> None:
        torch.cuda.cudart().cudaHostUnregister(self.tensor.data_ptr())


def zero_copy_gather(features: torch.Tensor, ids: torch.Tensor, engine: str) -> torch.Tensor:
    """Rows of the pinned ``features`` gathered by the GPU itself (``ids`` on the GPU)."""
    if engine == "dgl":
        import dgl.utils

        return dgl.utils.gather_pinned_tensor_rows(features, ids)
    if engine == "triton":
        return triton_gather(features, ids)
    raise ValueError(f"unknown zero-copy engine {engine!r}: use zero_copy_engine() to pick one")


def measure_link(nbytes: int = 64 << 20, repeats: int = 5) -> tuple[float, float]:
    """Measured host-to-device bandwidth (bytes/s, one large pinned copy) and latency (s, a 4-byte copy)."""
    if not torch.cuda.is_available():
        raise RuntimeError("measuring the link needs a CUDA device")
    big = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    small = torch.empty(4, dtype=torch.uint8, pin_memory=True)
    sync = torch.cuda.synchronize
    seconds = statistics.median(timings(lambda: big.to("cuda", non_blocking=True), repeats, sync))
    latency = statistics.median(timings(lambda: small.to("cuda", non_blocking=True), repeats, sync))
    return nbytes / max(seconds - latency, 1e-9), latency


def pinned_to_device(features: torch.Tensor, ids: torch.Tensor, staging: torch.Tensor,
                     device: str = "cuda") -> torch.Tensor:
    """The pinned path: gather into the pinned ``staging`` buffer, DMA it to ``device``, and wait
    for the copy (the next minibatch reuses the buffer)."""
    out = gather_into(features, ids, staging).to(device, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    return out


def measure_device(features: torch.Tensor, batches: Sequence[torch.Tensor], repeats: int = 7
                   ) -> dict[str, list[float]]:
    """Seconds per minibatch of all three paths onto the GPU, end to end (synchronised), with the
    rows on the device checked equal across paths.  Needs CUDA."""
    engine = zero_copy_engine()
    if engine is None:
        raise RuntimeError("measuring the device paths needs a CUDA device (and DGL with CUDA or Triton)")
    rows = max(len(b) for b in batches)
    staging = staging_buffer(rows, features.shape[1], features.dtype, pin=True)
    table = features.contiguous().clone()     # pinned in place below; the caller's tensor is left alone
    sync = torch.cuda.synchronize
    with PinnedInPlace(table):
        # each path takes CPU ids from the sampler; the zero-copy path must ship them to the GPU first
        work = {"pageable": lambda: [features[b].to("cuda") for b in batches],
                "pinned": lambda: [pinned_to_device(features, b, staging) for b in batches],
                "zero-copy": lambda: [zero_copy_gather(table, b.to("cuda", non_blocking=True), engine)
                                      for b in batches]}
        results = {p: fn() for p, fn in work.items()}
        sync()
        for p in PATHS[1:]:
            for a, b in zip(results["pageable"], results[p]):
                if not torch.equal(a, b):
                    raise AssertionError(f"the {p} path delivered other rows than the pageable one")
        return _interleaved(work, repeats, len(batches), sync)
