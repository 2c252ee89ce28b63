"""Pipelining across minibatches (book section 5.2.1): while the model computes
step i, another process already samples and fetches the features of step i+1.

Book: 5.2.1 operator parallelism across minibatches (pipelining).

Used in: no notebook directly.

A minibatch step has three stages: *sample* the blocks (DGL's neighbour
sampler), *fetch* the input nodes' feature rows and the seeds' labels, and
*compute* (forward, backward, optimiser step, :func:`gnnbook.training.minibatch.minibatch_step`).
The serial loop runs them one after the other, so an epoch lasts about
sum(stages).  The pipelined loop runs sample + fetch in a producer process
that works ahead (at most ``depth`` minibatches fetched and waiting, plus the
one it is sampling); an epoch then lasts about max(stage) (the argument of
SALIENT, Kaler et al., MLSys 2022).

Both loops draw the same minibatches for a seed: they run the same sampler
code (:func:`gnnbook.training.minibatch.neighbor_loader`, one thread, seeded from
NumPy's generator) on the same graph arrays.  What crosses between the
processes is plain arrays: the producer writes each minibatch (feature rows,
labels, node ids, block edges) into one of ``depth`` slots of a shared-memory
arena and sends a short JSON header (slot, shapes, offsets, stage times) over
a Unix socket; nothing is pickled.  The consumer hands a slot back once the
step that used it is done, so at most ``depth`` minibatches are in flight
(a bounded queue).  The producer is supervised by :class:`gnnbook.base.procs.ProcessGroup`:
a deadline, a clear :class:`gnnbook.base.procs.ProcessFailed` as soon as it dies,
and nothing (process, /dev/shm file, socket) left behind.

Example:
    >>> from gnnbook.data import load_dataset
    >>> from gnnbook.ch5_minibatch.pipelining import run_loop
    >>> g = load_dataset("cora")                                              # doctest: +SKIP
    >>> nodes = torch.arange(512)                                             # doctest: +SKIP
    >>> serial = run_loop(SerialLoader(g, nodes, [10, 10], 64), g, hidden=16)  # doctest: +SKIP
    >>> with PrefetchingLoader(g, nodes, [10, 10], 64) as loader:             # doctest: +SKIP
    ...     pipelined = run_loop(loader, g, hidden=16)
    >>> pipelined.epoch_seconds[0] < serial.epoch_seconds[0]                  # doctest: +SKIP
    True
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Iterator, Sequence

import dgl
import numpy as np
import torch

from ..training.minibatch import check_fanouts, neighbor_loader
from ..base.procs import ProcessFailed, ProcessGroup, describe_exit, tail
from ..base.reaper import SHM_DIR
from ..training.train import prepare_graph

# time.monotonic is CLOCK_MONOTONIC on Linux: one clock for every process of
# the machine, so the producer's and the consumer's stage times share a timeline.
now = time.monotonic

_DTYPES = {str(t).removeprefix("torch."): t for t in (torch.float16, torch.bfloat16, torch.float32,
                                                        torch.float64, torch.int32, torch.int64)}
_ALIGN = 64
_GRAPH_ARRAYS = ("src", "dst", "feat", "labels", "seeds")


@dataclass
class Minibatch:
    """One minibatch as the training loop sees it, with when it was made."""
    epoch: int
    step: int
    input_nodes: torch.Tensor
    output_nodes: torch.Tensor
    blocks: list
    x: torch.Tensor  # the input nodes' feature rows (fetched)
    y: torch.Tensor  # the seeds' labels
    sample: tuple[float, float]
    fetch: tuple[float, float]
    wait: tuple[float, float] | None = None  # pipelined: the consumer waiting for (and unpacking) it


def kernels_on_one_thread() -> contextlib.AbstractContextManager:
    """torch and DGL kernels on one thread each inside the block.  On a 2-core
    machine the consumer's compute and the producer's sampling must each own
    a core: with two OpenMP threads the compute would fight the producer for
    both cores (spinning threads, preemption) and the overlap would be lost."""
    @contextlib.contextmanager
    def scope():
        torch_threads, dgl_threads = torch.get_num_threads(), dgl.utils.get_num_threads()
        torch.set_num_threads(1)
        dgl.utils.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(torch_threads)
            dgl.utils.set_num_threads(dgl_threads)
    return scope()


def graph_arrays(graph: dgl.DGLGraph, seed_nodes: torch.Tensor) -> dict[str, torch.Tensor]:
    """The arrays both loops sample from: the edges of ``graph`` with one
    self-loop per node (as :func:`gnnbook.training.minibatch.train_minibatch`), features, labels, seeds."""
    g = prepare_graph(graph)
    src, dst = g.edges()
    seeds = torch.as_tensor(seed_nodes, dtype=torch.int64)
    if seeds.numel() == 0 or int(seeds.min()) < 0 or int(seeds.max()) >= g.num_nodes():
        raise ValueError(f"seed_nodes must be node ids in [0, {g.num_nodes()}), got {seeds.numel()} ids")
    return dict(src=src.contiguous(), dst=dst.contiguous(), feat=g.ndata["feat"].contiguous(),
                labels=g.ndata["label"].contiguous(), seeds=seeds.contiguous())


class _Sampler:
    """The one sampler both loops run, an epoch at a time.  Minibatches depend
    only on NumPy's generator (shuffling, and the sampler's per-pass seed),
    seeded here, so a seed gives the same minibatches in either process."""

    def __init__(self, arrays: dict[str, torch.Tensor], fanouts: Sequence[int], batch_size: int, seed: int):
        self.graph = dgl.graph((arrays["src"], arrays["dst"]), num_nodes=arrays["feat"].shape[0])
        self.graph.create_formats_()
        self.seeds, self.fanouts, self.batch_size = arrays["seeds"], list(fanouts), batch_size
        np.random.seed(seed)

    def epoch(self) -> Iterator[tuple[int, torch.Tensor, torch.Tensor, list, tuple[float, float]]]:
        """``(step, input_nodes, output_nodes, blocks, (sample start, end))`` of one epoch."""
        batches = iter(neighbor_loader(self.graph, self.seeds, self.fanouts, self.batch_size, shuffle=True))
        step = 0
        while True:
            start = now()
            # torch's DataLoader draws a base seed from torch's generator on its first
            # batch: keep that off the global stream, so that the model's dropout
            # draws the same in both loops (the sampler itself draws from NumPy and DGL).
            try:
                with torch.random.fork_rng(devices=[]):
                    input_nodes, output_nodes, blocks = next(batches)
            except StopIteration:
                return
            yield step, input_nodes, output_nodes, blocks, (start, now())
            step += 1


class _EpochLoader:
    """``epoch()`` yields the next epoch's minibatches; iterating yields all epochs left."""
    epochs: int
    _next_epoch: int = 0

    def epoch(self) -> Iterator[Minibatch]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Minibatch]:
        while self._next_epoch < self.epochs:
            yield from self.epoch()


class SerialLoader(_EpochLoader):
    """Minibatches sampled and fetched in the calling process, just before each step.

    Example:
        >>> g = dgl.graph(([0, 1, 2], [1, 2, 0]))
        >>> g.ndata.update(feat=torch.ones(3, 2), label=torch.zeros(3, dtype=torch.int64))
        >>> [len(mb.output_nodes) for mb in SerialLoader(g, torch.arange(3), [2], 2)]
        [2, 1]
    """

    def __init__(self, graph: dgl.DGLGraph, seed_nodes: torch.Tensor, fanouts: Sequence[int], batch_size: int,
                 epochs: int = 1, seed: int = 0):
        self.arrays = graph_arrays(graph, seed_nodes)
        self.epochs, self._next_epoch = epochs, 0
        self._sampler = _Sampler(self.arrays, check_fanouts(fanouts, len(fanouts)), batch_size, seed)

    def epoch(self) -> Iterator[Minibatch]:
        epoch, self._next_epoch = self._next_epoch, self._next_epoch + 1
        if epoch >= self.epochs:
            return
        for step, input_nodes, output_nodes, blocks, sample in self._sampler.epoch():
            start = now()
            x, y = self.arrays["feat"][input_nodes], self.arrays["labels"][output_nodes]
            yield Minibatch(epoch, step, input_nodes, output_nodes, blocks, x, y, sample, (start, now()))


# --- the shared-memory arena: graph arrays, then `depth` minibatch slots ------

def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _slot_bytes(arrays: dict[str, torch.Tensor], fanouts: Sequence[int], batch_size: int) -> int:
    """An upper bound of one minibatch's bytes (the file is sparse: untouched pages cost nothing)."""
    n, e = arrays["feat"].shape[0], arrays["src"].numel()
    rows = min(n, batch_size * int(np.prod([f + 1 if f > 0 else n for f in fanouts])))
    edges = sum(e if f < 0 else min(e, rows * f) for f in fanouts)
    row_bytes = arrays["feat"][0].numel() * arrays["feat"].element_size()
    return _aligned(rows * row_bytes) + 3 * _aligned(rows * 8) + 2 * edges * 8 + 2 * len(fanouts) * _ALIGN


def _view(arena: torch.Tensor, offset: int, dtype: str, shape: Sequence[int]) -> torch.Tensor:
    if dtype not in _DTYPES:
        raise ValueError(f"unexpected dtype {dtype!r} in a minibatch header; allowed: {', '.join(_DTYPES)}")
    t = _DTYPES[dtype]
    count = int(np.prod(shape)) if len(shape) else 1
    nbytes = count * torch.empty((), dtype=t).element_size()
    if offset < 0 or offset + nbytes > arena.numel():
        raise ValueError(f"a minibatch header points outside the arena (offset {offset}, {nbytes} bytes)")
    return arena[offset:offset + nbytes].view(t).view(*shape)


def _layout(arrays: dict[str, torch.Tensor], start: int = 0) -> tuple[dict[str, list], int]:
    """Where each array goes: ``{name: [dtype, shape, offset]}`` and the end offset."""
    specs, offset = {}, start
    for name, t in arrays.items():
        specs[name] = [str(t.dtype).removeprefix("torch."), list(t.shape), offset]
        offset = _aligned(offset + t.numel() * t.element_size())
    return specs, offset


def _send(conn: Connection, message: dict[str, Any]) -> None:
    conn.send_bytes(json.dumps(message).encode())


def _put(arena: torch.Tensor, spec: dict[str, Any], arrays: dict[str, torch.Tensor], slot: int, epoch: int,
         step: int, input_nodes: torch.Tensor, output_nodes: torch.Tensor, blocks: list,
         sample: tuple[float, float]) -> dict[str, Any]:
    """Fetch one minibatch into ``slot``; returns its header."""
    start = now()
    base = spec["slots_offset"] + slot * spec["slot_bytes"]
    parts = {"input_nodes": input_nodes, "output_nodes": output_nodes}
    for layer, block in enumerate(blocks):
        parts[f"u{layer}"], parts[f"v{layer}"] = block.edges()
    feat, labels = arrays["feat"], arrays["labels"]
    rows = {"x": torch.empty((len(input_nodes), *feat.shape[1:]), dtype=feat.dtype, device="meta"),
            "y": torch.empty(len(output_nodes), dtype=labels.dtype, device="meta")}
    layout, end = _layout({**rows, **parts}, base)
    if end > base + spec["slot_bytes"]:
        raise RuntimeError(f"a minibatch of {end - base} bytes does not fit a slot of {spec['slot_bytes']}")
    # Fetch: gather the feature rows and labels straight into the slot (no second copy).
    torch.index_select(feat, 0, input_nodes, out=_view(arena, layout["x"][2], *layout["x"][:2]))
    torch.index_select(labels, 0, output_nodes, out=_view(arena, layout["y"][2], *layout["y"][:2]))
    for name, t in parts.items():
        _view(arena, layout[name][2], *layout[name][:2]).copy_(t)
    return {"epoch": epoch, "step": step, "slot": slot, "tensors": layout, "sample": sample,
            "fetch": [start, now()], "blocks": [[b.num_src_nodes(), b.num_dst_nodes()] for b in blocks]}


def _produce(spec: dict[str, Any]) -> None:
    """The producer process: sample and fetch ahead, one slot per minibatch."""
    # One thread: the consumer's compute owns the other core (see kernels_on_one_thread).
    torch.set_num_threads(1)
    dgl.utils.set_num_threads(1)
    arena = torch.from_file(spec["arena"], shared=True, size=spec["arena_bytes"], dtype=torch.uint8)
    arrays = {name: _view(arena, offset, dtype, shape) for name, (dtype, shape, offset) in spec["graph"].items()}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(spec["socket"])
    conn = Connection(sock.detach())
    _send(conn, {"ready": os.getpid()})
    free, started = [], -1  # slots handed back; the last epoch the consumer started

    def read() -> None:
        nonlocal started
        message = json.loads(conn.recv_bytes())  # EOFError: the consumer is gone
        free.extend(message.get("free", []))
        started = max(started, message.get("go", -1))

    sampler = _Sampler(arrays, spec["fanouts"], spec["batch_size"], spec["seed"])
    # Python's full collections walk every object torch and DGL created at import: about 100 ms here, landing
    # on the same epoch every run. Freezing them leaves the collector the sampler's short-lived objects only.
    gc.freeze()
    try:
        for epoch in range(spec["epochs"]):
            while started < epoch:  # an epoch starts when the consumer starts it, as in the serial loop
                read()
            for step, input_nodes, output_nodes, blocks, sample in sampler.epoch():
                while not free:  # the bounded queue: wait until the consumer hands a slot back
                    read()
                _send(conn, _put(arena, spec, arrays, free.pop(0), epoch, step, input_nodes, output_nodes,
                                 blocks, sample))
            _send(conn, {"epoch_end": epoch})
        while True:  # all sent: wait until the consumer closes its end
            read()
    except EOFError:
        return


class PrefetchingLoader(_EpochLoader):
    """Minibatches sampled and fetched ahead by a producer process.

    Use it as a context manager; :meth:`epoch` (or iterating, for all epochs)
    yields :class:`Minibatch` objects in the order :class:`SerialLoader`
    yields them (same seed, same minibatches).  The producer starts an epoch
    when the consumer does, as the serial loop would, and then keeps at most
    ``depth`` minibatches fetched ahead.  A minibatch's tensors (node ids,
    rows, labels and its blocks' edges) are views into a shared slot that is
    reused once the next minibatch is requested: finish with one (or clone
    what you keep) before asking for the next, and consume an epoch to its end.
    ``deadline_s`` bounds the whole run, start-up included.

    Example:
        >>> from gnnbook.data import load_dataset
        >>> with PrefetchingLoader(load_dataset("cora"), torch.arange(256), [5, 5], 64) as loader:  # doctest: +SKIP
        ...     steps = [mb.step for mb in loader]
        >>> steps                                                                                  # doctest: +SKIP
        [0, 1, 2, 3]
    """

    def __init__(self, graph: dgl.DGLGraph, seed_nodes: torch.Tensor, fanouts: Sequence[int], batch_size: int,
                 epochs: int = 1, seed: int = 0, depth: int = 2, deadline_s: float = 300.0):
        if depth < 1:
            raise ValueError(f"depth (minibatches in flight) must be >= 1, got {depth}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.arrays = graph_arrays(graph, seed_nodes)
        self.fanouts, self.batch_size = check_fanouts(fanouts, len(fanouts)), batch_size
        self.epochs, self.seed, self.depth, self.deadline_s = epochs, seed, depth, deadline_s
        self._next_epoch, self._abandoned = 0, False
        self.group: ProcessGroup | None = None
        self.producer_pid: int | None = None
        self._conn: Connection | None = None
        self._paths: list[Path] = []

    @property
    def tag(self) -> str | None:
        """The job tag of the producer (every process and file of the job carries it)."""
        return self.group.tag if self.group else None

    def __enter__(self) -> "PrefetchingLoader":
        # The job's folder (the sampler's log, the socket): removed when the run
        # ends well or the supervisor dies, kept after a failure for its log.
        self.group = ProcessGroup(self.deadline_s, log_dir=tempfile.mkdtemp(prefix="gnnbook-prefetch-"), grace_s=5.0)
        self.group.remove_on_death(self.group.log_dir)
        try:
            self._start()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def _start(self) -> None:
        group = self.group
        graph_layout, slots_offset = _layout(self.arrays)
        slot_bytes = _slot_bytes(self.arrays, self.fanouts, self.batch_size)
        arena_bytes = slots_offset + self.depth * slot_bytes
        arena_path = SHM_DIR / f"{group.tag}-prefetch"  # the tag: the reaper removes it if we die
        self._paths.append(arena_path)
        fd = os.open(arena_path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, arena_bytes)
        finally:
            os.close(fd)
        self._arena = torch.from_file(str(arena_path), shared=True, size=arena_bytes, dtype=torch.uint8)
        for name, (dtype, shape, offset) in graph_layout.items():
            _view(self._arena, offset, dtype, shape).copy_(self.arrays[name])
        socket_path = group.log_dir / "prefetch.sock"  # in the job's private (0700) folder
        self._paths.append(socket_path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(socket_path))
        listener.listen(1)
        spec = dict(arena=str(arena_path), arena_bytes=arena_bytes, graph=graph_layout, slots_offset=slots_offset,
                    slot_bytes=slot_bytes, socket=str(socket_path), fanouts=self.fanouts,
                    batch_size=self.batch_size, epochs=self.epochs, seed=self.seed)
        self._popen = group.start("sampler", [sys.executable, "-m", "gnnbook.ch5_minibatch.prefetch", json.dumps(spec)])
        self.producer_pid = self._popen.pid
        listener.settimeout(0.1)
        try:
            while self._conn is None:
                try:
                    self._conn = Connection(listener.accept()[0].detach())
                except socket.timeout:
                    self._check_producer()
        finally:
            listener.close()
        self._receive()  # "ready": the producer has mapped the arena and connected
        for path in self._paths:  # both ends hold them open: nothing named is left to leak
            path.unlink(missing_ok=True)

    def _failed(self, reason: str) -> ProcessFailed:
        self.group.kill()
        return ProcessFailed("sampler", self._popen.returncode, tail(self.group.log_dir / "sampler.log"), reason)

    def _check_producer(self, gone: bool = False) -> None:
        """Raise if the producer died (or, with ``gone``, closed its end) or the deadline passed."""
        if gone:
            with contextlib.suppress(Exception):
                self._popen.wait(5)
        code = self._popen.poll()
        if code is not None and (code != 0 or gone):
            raise self._failed(f"the sampler process (the pipelined loader's producer) {describe_exit(code)} "
                               "before the last minibatch; the pipelined loop was stopped")
        if gone:
            raise self._failed("the sampler process closed its connection before the last minibatch")
        if time.monotonic() > self.group.deadline:
            raise self._failed(f"deadline of {self.deadline_s:.0f} s passed while waiting for the sampler "
                               "process; raise deadline_s for a larger graph")

    def _receive(self) -> dict[str, Any]:
        while True:
            if self._conn.poll(0.05):
                try:
                    return json.loads(self._conn.recv_bytes())
                except (EOFError, OSError):
                    self._check_producer(gone=True)
            self._check_producer()

    def epoch(self) -> Iterator[Minibatch]:
        """The next epoch's minibatches."""
        if self._conn is None:
            raise RuntimeError("use PrefetchingLoader as a context manager: with PrefetchingLoader(...) as loader")
        if self._abandoned:
            raise RuntimeError("an epoch was left before its end: its minibatches are still in flight; "
                               "start a new PrefetchingLoader")
        epoch, self._next_epoch = self._next_epoch, self._next_epoch + 1
        if epoch >= self.epochs:
            return
        _send(self._conn, {"go": epoch, "free": list(range(self.depth)) if epoch == 0 else []})
        self._abandoned = True  # until the epoch's end arrives
        while True:
            start = now()
            header = self._receive()
            if "epoch_end" in header:
                self._abandoned = False
                return
            t = {name: _view(self._arena, offset, dtype, shape)
                 for name, (dtype, shape, offset) in header["tensors"].items()}
            # Every tensor, the blocks' edges included, is a view into the slot: no copy on the trainer's side.
            blocks = [dgl.create_block((t[f"u{i}"], t[f"v{i}"]), num_src_nodes=ns, num_dst_nodes=nd)
                      for i, (ns, nd) in enumerate(header["blocks"])]
            yield Minibatch(header["epoch"], header["step"], t["input_nodes"], t["output_nodes"],
                            blocks, t["x"], t["y"], tuple(header["sample"]), tuple(header["fetch"]), (start, now()))
            _send(self._conn, {"free": [header["slot"]]})

    def __exit__(self, *exc) -> None:
        try:
            if self._conn is not None:
                self._conn.close()  # the producer sees EOF and exits
                with contextlib.suppress(Exception):
                    self._popen.wait(5)
        finally:
            self._conn = None
            for path in self._paths:
                path.unlink(missing_ok=True)
            if self.group is not None:
                self.group.__exit__(*exc)
                if exc[0] is None:
                    shutil.rmtree(self.group.log_dir, ignore_errors=True)


if __name__ == "__main__":
    _produce(json.loads(sys.argv[1]))
