"""Collectives over torch.distributed with their bytes measured on the wire, and a link cost model.

Book: 5.5.1 collective communication (bytes measured beside the formula).

Used in: chapters/03_distributed_ml.ipynb, chapters/05c_execution_engine.ipynb,
chapters/06a_fullgraph_parallelism.ipynb, chapters/06c_sync_and_async_protocols.ipynb.

:class:`Comm` wraps the torch.distributed calls the course uses.  For every
call it records, per rank, two predictions side by side:

- ``formula``: the textbook volume of the algorithm gloo runs (all-reduce of S
  bytes: ring, ``2(N-1)/N * S``; all-gather: ``(N-1) * shard``; point-to-point
  and all-to-all: the tensor bytes that go to / come from other ranks; ...);
- ``expected``: the byte-exact model of :mod:`gnnbook.comm.gloo_bytes` -- gloo's
  own chunking plus its 48-byte message headers;

and it **measures** what the rank's TCP sockets really carried
(:mod:`gnnbook.base.wire`, the kernel's counters), from construction to each
:meth:`Comm.read` / :meth:`Comm.summary`.  ``sent`` / ``received`` are those
measured bytes; the headers make them exceed the formula by a small,
stated overhead (``expected - formula``).

Measuring needs quiet moments.  The kernel counts every socket of the
process, so a measured interval must begin and end when no gloo message is
in flight.  Construction, :meth:`Comm.read`, :meth:`Comm.summary` and
:meth:`Comm.window` are therefore **collective**: every rank of the default
group calls them at the same point of its program.  They meet through the
rendezvous store (a socket the counter leaves out), wait until every byte a
peer put on a connection has been counted at this end, and only then read
the counters.

The second half is a cost model (clearly a model, not a measurement) of the
time a ring all-reduce takes on typical links.

Example:
    >>> ring_allreduce_bytes(100, 4)
    150.0
    >>> round(allreduce_time_s(1e9, 8, "NVLink (A100)"), 4)
    0.0059
"""
from __future__ import annotations

import contextlib
import json
import socket
import time
from collections import defaultdict
from typing import Any, Iterator

import torch
import torch.distributed as dist

from . import gloo_bytes
from ..base.wire import Connection, difference, tcp_connections


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def ring_allreduce_bytes(size_bytes: float, world_size: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of ``size_bytes``."""
    return 2 * (world_size - 1) / world_size * size_bytes


# ----- quiet points: every rank meets through the store, then the counters settle -----

_SEQUENCE = [0]       # quiet points so far in this process (the same in every rank)
SETTLE_TIMEOUT_S = 30.0


def _store_and_address() -> tuple[Any, tuple[str, int]]:
    store = dist.distributed_c10d._get_default_store()
    base = store
    while hasattr(base, "underlying_store"):
        base = base.underlying_store
    if not hasattr(base, "port"):
        raise RuntimeError("measuring wire bytes needs torch.distributed initialised with a TCPStore "
                           "(gnnbook.base.launch.run does that); pass measure=False to Comm otherwise")
    return store, (socket.gethostbyname(base.host), base.port)


def _meet(store: Any, key: str, world: int) -> None:
    if store.add(key, 1) == world:
        store.set(key + "/go", "1")
    else:
        store.wait([key + "/go"])


def quiet_snapshot() -> dict[int, Connection]:
    """Collective: once every rank got here, the counters of this rank's gloo
    sockets, after every byte its peers had sent on them arrived.

    The wait matters: a rank's call returns as soon as its own part is done,
    and a 48-byte notice a peer sent may still be on its way."""
    store, address = _store_and_address()
    rank, world = dist.get_rank(), dist.get_world_size()
    _SEQUENCE[0] += 1
    key = f"gnnbook/base/wire/{_SEQUENCE[0]}"
    _meet(store, key + "/done", world)                  # nobody sends any more
    conns = tcp_connections(exclude=[address])
    store.set(f"{key}/sent/{rank}", json.dumps({f"{c.local}>{c.peer}": c.sent for c in conns.values() if c.peer}))
    owed = {}
    for other in range(world):
        if other != rank:
            for ends, sent in json.loads(store.get(f"{key}/sent/{other}")).items():
                owed[ends] = sent                        # "their local>their peer"
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        late = [c for c in conns.values() if c.peer and c.received < owed.get(f"{c.peer}>{c.local}", 0)]
        if not late or time.monotonic() > deadline:
            break
        time.sleep(0.0005)
        conns = tcp_connections(exclude=[address])
    _meet(store, key + "/read", world)                  # nobody sends before everyone has read
    return conns


class Comm:
    """torch.distributed calls for this rank, each with its formula bytes and
    its expected wire bytes; ``sent`` / ``received``: bytes measured on the
    sockets from construction to the last :meth:`read` (see the module doc:
    construction, :meth:`read`, :meth:`summary` and :meth:`window` are collective).

    ``measure_each=True`` brackets every blocking collective with quiet points,
    so ``summary()["by_op"]`` holds measured bytes per operation too.

    Example (inside a rank, 2 ranks):
        >>> comm = Comm()                                    # doctest: +SKIP
        >>> comm.all_reduce(torch.ones(1000)); comm.read()   # doctest: +SKIP
        (4576, 4576)   # formula 2*(2-1)/2 * 4000 bytes, + 4 messages x 144 B of gloo headers
    """

    def __init__(self, group: Any = None, measure: bool = True, measure_each: bool = False) -> None:
        if group is not None and measure:
            raise ValueError("wire measurement covers the default group only; pass measure=False for a subgroup")
        self.group, self.measure, self.measure_each = group, measure, measure_each
        self.sent = self.received = 0
        self.calls = 0
        self.formula = [0.0, 0.0]
        self.expected = gloo_bytes.Volume()
        self.rounding = 0          # bound on how far gloo's ring segments (whole elements) move bytes off the formula
        self.by_op: dict[str, dict[str, Any]] = defaultdict(lambda: {
            "calls": 0, "formula_sent": 0.0, "formula_received": 0.0, "expected": gloo_bytes.Volume(), "rounding": 0})
        self.windows: dict[str, tuple[int, int]] = {}
        self._start = quiet_snapshot() if measure and self.world_size > 1 else {}

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group)

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)

    # ----- measurement -----
    def read(self) -> tuple[int, int]:
        """Collective: measured (sent, received) since construction; also kept in ``sent`` / ``received``."""
        if self.measure and self.world_size > 1:
            self.sent, self.received = difference(quiet_snapshot(), self._start)
        return self.sent, self.received

    @contextlib.contextmanager
    def window(self, label: str) -> Iterator[None]:
        """Collective: measure the bytes of the ``with`` body alone, into ``windows[label]`` (added up)."""
        start = quiet_snapshot()
        yield
        sent, received = difference(quiet_snapshot(), start)
        old = self.windows.get(label, (0, 0))
        self.windows[label] = (old[0] + sent, old[1] + received)

    def summary(self) -> dict[str, Any]:
        """Collective: measured, formula and expected bytes, in total and per operation."""
        self.read()

        def row(calls, f_sent, f_received, v: gloo_bytes.Volume, rounding: int) -> dict[str, Any]:
            return {"calls": calls, "formula_sent": f_sent, "formula_received": f_received,
                    "expected_sent": v.wire_sent, "expected_received": v.wire_received,
                    "payload_sent": v.sent, "payload_received": v.received,
                    "messages_sent": v.messages_sent, "messages_received": v.messages_received,
                    "headers_sent": v.wire_sent - v.sent, "headers_received": v.wire_received - v.received,
                    "rounding_bound": rounding}

        by_op = {}
        for op, r in self.by_op.items():
            by_op[op] = row(r["calls"], r["formula_sent"], r["formula_received"], r["expected"], r["rounding"])
            if op in self.windows:
                by_op[op]["sent"], by_op[op]["received"] = self.windows[op]
        return {"sent": self.sent, "received": self.received, "measured": self.measure,
                **row(self.calls, *self.formula, self.expected, self.rounding), "by_op": by_op,
                "windows": {k: list(v) for k, v in self.windows.items() if k not in self.by_op}}

    def _count(self, op: str, formula_sent: float, formula_received: float, expected: gloo_bytes.Volume,
               rounding: int = 0) -> None:
        self.calls += 1
        self.rounding += rounding
        self.formula[0] += formula_sent
        self.formula[1] += formula_received
        self.expected = self.expected + expected
        row = self.by_op[op]
        row["calls"] += 1
        row["formula_sent"] += formula_sent
        row["formula_received"] += formula_received
        row["expected"] = row["expected"] + expected
        row["rounding"] += rounding

    def _blocking(self, op: str, call) -> Any:
        if self.measure_each and self.measure and self.world_size > 1:
            with self.window(op):
                return call()
        return call()

    # ----- point to point: exact -----
    def send(self, t: torch.Tensor, dst: int) -> None:
        self._count("send", nbytes(t), 0, gloo_bytes.send(nbytes(t)))
        dist.send(t, dst, group=self.group)

    def recv(self, t: torch.Tensor, src: int | None = None) -> int:
        sender = dist.recv(t, src, group=self.group)
        self._count("recv", 0, nbytes(t), gloo_bytes.recv(nbytes(t)))
        return sender

    def isend(self, t: torch.Tensor, dst: int):
        self._count("send", nbytes(t), 0, gloo_bytes.send(nbytes(t)))
        return dist.isend(t, dst, group=self.group)

    def irecv(self, t: torch.Tensor, src: int):
        self._count("recv", 0, nbytes(t), gloo_bytes.recv(nbytes(t)))
        return dist.irecv(t, src, group=self.group)

    # ----- collectives -----
    def all_reduce(self, t: torch.Tensor, op=dist.ReduceOp.SUM, async_op: bool = False):
        n = self.world_size
        volume = ring_allreduce_bytes(nbytes(t), n)
        self._count("all_reduce", volume, volume, gloo_bytes.all_reduce(nbytes(t), t.element_size(), n, self.rank),
                    gloo_bytes.ring_rounding_bound(t.element_size(), n))
        if async_op:
            return dist.all_reduce(t, op=op, group=self.group, async_op=True)
        return self._blocking("all_reduce", lambda: dist.all_reduce(t, op=op, group=self.group))

    def all_gather_into_tensor(self, out: torch.Tensor, shard: torch.Tensor) -> None:
        volume = (self.world_size - 1) * nbytes(shard)
        self._count("all_gather", volume, volume, gloo_bytes.all_gather(nbytes(shard), self.world_size))
        self._blocking("all_gather", lambda: dist.all_gather_into_tensor(out, shard, group=self.group))

    def reduce_scatter_tensor(self, out: torch.Tensor, full: torch.Tensor, op=dist.ReduceOp.SUM) -> None:
        """Formula: what gloo runs for it (see :mod:`gnnbook.comm.gloo_bytes`): a ring
        all-reduce of ``full``, then rank 0 sends each rank its shard."""
        n, me = self.world_size, self.rank
        ring = ring_allreduce_bytes(nbytes(full), n)
        scatter_out, scatter_in = ((n - 1) * nbytes(out), 0) if me == 0 else (0, nbytes(out))
        self._count("reduce_scatter", ring + scatter_out, ring + scatter_in,
                    gloo_bytes.reduce_scatter(nbytes(full), full.element_size(), n, me),
                    gloo_bytes.ring_rounding_bound(full.element_size(), n))
        self._blocking("reduce_scatter", lambda: dist.reduce_scatter_tensor(out, full, op=op, group=self.group))

    def broadcast(self, t: torch.Tensor, src: int) -> None:
        """Formula: gloo's binomial tree -- the tensor once into every rank but the root.
        ``src`` is a global rank, as in ``torch.distributed.broadcast``, also on a subgroup."""
        root = src if self.group is None else dist.get_group_rank(self.group, src)
        volume = gloo_bytes.broadcast(nbytes(t), self.world_size, self.rank, root)
        self._count("broadcast", volume.sent, volume.received, volume)
        self._blocking("broadcast", lambda: dist.broadcast(t, src, group=self.group))

    def all_to_all_single(self, out: torch.Tensor, inp: torch.Tensor,
                          out_splits: list[int] | None = None, in_splits: list[int] | None = None) -> None:
        n, me = self.world_size, self.rank
        row_in = nbytes(inp) // max(inp.shape[0], 1)
        row_out = nbytes(out) // max(out.shape[0], 1)
        ins = in_splits if in_splits is not None else [inp.shape[0] // n] * n
        outs = out_splits if out_splits is not None else [out.shape[0] // n] * n
        sent, received = row_in * (sum(ins) - ins[me]), row_out * (sum(outs) - outs[me])
        self._count("all_to_all", sent, received, gloo_bytes.all_to_all(sent, received, n))
        self._blocking("all_to_all", lambda: dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group))

    def barrier(self) -> None:
        self._count("barrier", 0, 0, gloo_bytes.barrier(self.world_size))
        self._blocking("barrier", lambda: dist.barrier(group=self.group))


def wire_vs_formula(summary: dict[str, Any], direction: str = "sent") -> dict[str, Any]:
    """One rank's measured bytes beside the formula (from :meth:`Comm.summary`), and the stated
    overhead: gloo's headers (48 B x 3 per message) and its ring rounding.  ``agrees``:
    ``|measured - formula - headers| <= rounding bound``; ``overhead``: ``(measured - formula) / formula``.

    Example:
        >>> row = wire_vs_formula({"sent": 1144, "formula_sent": 1000, "headers_sent": 144, "rounding_bound": 0})
        >>> row["agrees"], row["overhead"]
        (True, 0.144)
    """
    measured, formula = summary[direction], summary[f"formula_{direction}"]
    headers, rounding = summary[f"headers_{direction}"], summary["rounding_bound"]
    return {"measured": measured, "formula": formula, "gloo headers": headers, "rounding bound": rounding,
            "overhead": (measured - formula) / formula if formula else 0.0,
            "agrees": abs(measured - formula - headers) <= rounding}


# ----- a cost model of links (a MODEL: nominal unidirectional bandwidths and latencies) -----

LINKS: dict[str, dict[str, float]] = {
    # bandwidth in bytes/s per direction, latency in seconds (nominal figures)
    "NVLink (A100)": {"bandwidth": 300e9, "latency": 2e-6},
    "PCIe 4.0 x16": {"bandwidth": 32e9, "latency": 5e-6},
    "100 GbE (RDMA)": {"bandwidth": 12.5e9, "latency": 5e-6},
    "10 GbE (TCP)": {"bandwidth": 1.25e9, "latency": 50e-6},
}


def allreduce_time_s(size_bytes: float, world_size: int, link: str | dict[str, float]) -> float:
    """Modelled time of a ring all-reduce: 2(N-1) steps, each moving S/N bytes
    over the link: ``2(N-1) * (latency + S/(N*bandwidth))``.

    Example:
        >>> allreduce_time_s(0, 1, "10 GbE (TCP)")
        0.0
    """
    spec = LINKS[link] if isinstance(link, str) else link
    if world_size <= 1:
        return 0.0
    steps = 2 * (world_size - 1)
    return steps * (spec["latency"] + size_bytes / world_size / spec["bandwidth"])
