"""The wire time of a stated link, emulated on a machine whose processes talk over loopback.

Book: 5.5.3 communication links (a stated link, emulated: a model).

Used in: chapters/06c_sync_and_async_protocols.ipynb.

**A model of a link, not a measurement of a network.**  Processes on one
machine exchange bytes over loopback in microseconds to a few milliseconds,
whatever a cluster's network would take.  :class:`EmulatedLink` gives one
process's incoming link a stated bandwidth (bytes/s) and latency (s): an
exchange of ``n`` bytes posted at time ``t`` is not delivered before

    ``max(t, link free) + n / bandwidth + latency``

where "link free" is when the link finished the bytes of earlier exchanges
into this process (they queue, one network port per process; the latency of
one exchange overlaps the next one's bytes).  The receiver **sleeps** until
then (:meth:`EmulatedLink.wait_until`), so the delay costs wall time, not CPU,
and a transfer that the program overlaps with computation is hidden exactly
as far as the computation lasts.  The data itself still travels over loopback
and arrives unchanged: the model changes timing only.

What is left out (on purpose, it is a lower bound): the sender's outgoing
link, switch contention, and the time the sender posts later than the
receiver (the clock starts when the receiver posts).  Every process keeps its
own link; the ones used by :mod:`gnnbook.ch6_fullgraph.stale` model only the
boundary exchange, not the gradient all-reduce.

The stated links are those of :data:`gnnbook.comm.collectives.LINKS` (nominal figures);
``slowdown`` divides the bandwidth and multiplies the latency, i.e. multiplies
every wire time by the same factor, for graphs too small to keep a cluster's
ratio of communication to computation.

Example:
    >>> link = EmulatedLink.stated("10 GbE (TCP)")
    >>> round(link.wire_s(1_250_000) * 1e3, 3)       # 1.25 MB: 1 ms of bytes + 50 us latency
    1.05
    >>> round(EmulatedLink.stated("10 GbE (TCP)", slowdown=10).wire_s(1_250_000) * 1e3, 3)
    10.5
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from . import gloo_bytes


@dataclass
class EmulatedLink:
    """One process's incoming link: ``bandwidth`` bytes/s, ``latency`` seconds.  Counts the
    modelled wire time of every exchange (``modeled_s``, no queueing), the bytes, the exchanges,
    and the time slept waiting for the model (``slept_s``): what the program did not hide."""

    bandwidth: float
    latency: float
    modeled_s: float = 0.0
    slept_s: float = 0.0
    bytes: int = 0
    exchanges: int = 0
    _free_at: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not (self.bandwidth > 0 and self.latency >= 0):
            raise ValueError(f"a link needs bandwidth > 0 (bytes/s) and latency >= 0 (s), got "
                             f"{self.bandwidth!r}, {self.latency!r}")

    @classmethod
    def stated(cls, name: str, slowdown: float = 1.0) -> "EmulatedLink":
        """The link ``name`` of :data:`gnnbook.comm.collectives.LINKS`, every wire time ``slowdown`` times longer."""
        from .collectives import LINKS

        if name not in LINKS:
            raise ValueError(f"unknown link {name!r}; choose one of {', '.join(LINKS)}")
        if not slowdown >= 1:
            raise ValueError(f"slowdown must be >= 1 (it lengthens the stated link's wire time), got {slowdown!r}")
        spec = LINKS[name]
        return cls(spec["bandwidth"] / slowdown, spec["latency"] * slowdown)

    @classmethod
    def from_spec(cls, spec: dict[str, float] | None) -> "EmulatedLink | None":
        """``{"bandwidth": ..., "latency": ...}`` (picklable, for spawned processes), or None for no link."""
        if spec is None:
            return None
        if set(spec) != {"bandwidth", "latency"}:
            raise ValueError(f"a link spec has exactly the keys 'bandwidth' and 'latency', got {sorted(spec)}")
        return cls(float(spec["bandwidth"]), float(spec["latency"]))

    def spec(self) -> dict[str, float]:
        return {"bandwidth": self.bandwidth, "latency": self.latency}

    def wire_s(self, nbytes: int) -> float:
        """Modelled seconds of one exchange of ``nbytes`` on an idle link: ``latency + nbytes / bandwidth``."""
        return self.latency + nbytes / self.bandwidth

    def post(self, nbytes: int, posted: float | None = None) -> float:
        """An exchange of ``nbytes`` into this process, posted at ``posted`` (``time.perf_counter()``, default
        now): returns its modelled arrival time; its bytes queue behind the bytes still on the link."""
        posted = time.perf_counter() if posted is None else posted
        start = max(posted, self._free_at)
        self._free_at = start + nbytes / self.bandwidth
        self.modeled_s += self.wire_s(nbytes)
        self.bytes += nbytes
        self.exchanges += 1
        return self._free_at + self.latency

    def wait_until(self, arrival: float) -> float:
        """Sleep (no CPU) until ``arrival``; returns the seconds slept (measured), also added to ``slept_s``."""
        start = time.perf_counter()
        if arrival <= start:
            return 0.0
        time.sleep(arrival - start)
        slept = time.perf_counter() - start        # measured: the scheduler may wake us a little late
        self.slept_s += slept
        return slept

    def reset(self) -> None:
        """Forget the counters and the queue (a new run)."""
        self.modeled_s = self.slept_s = 0.0
        self.bytes = self.exchanges = 0
        self._free_at = 0.0


def wire_bytes(recv: torch.Tensor, counts: list[int], empty_messages: bool = False) -> int:
    """Bytes on the wire into this process for ``counts`` rows of ``recv`` from each peer: the payload
    and gloo's headers (2 x 48 B per message, :mod:`gnnbook.comm.gloo_bytes`).  A point-to-point exchange
    sends no message for an empty count; an all-to-all does (``empty_messages``), headers and all."""
    row = recv.element_size() * (recv.shape[1] if recv.dim() > 1 else 1)
    return sum(gloo_bytes.recv(c * row).wire_received for c in counts if c or empty_messages)


class LinkedComm:
    """``comm`` (:class:`gnnbook.comm.collectives.Comm`) whose blocking exchange ``all_to_all_single`` returns no
    earlier than the modelled arrival, on ``link``, of what this process receives (each peer's message
    with the sender's two headers; the peers' ready-to-receive notices for this process's own sends are
    left out, as in :func:`wire_bytes`); every other call goes straight to ``comm``."""

    def __init__(self, comm, link: EmulatedLink):
        self.comm, self.link = comm, link

    def all_to_all_single(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int]):
        posted = time.perf_counter()
        from_peers = [c for peer, c in enumerate(out_splits) if peer != self.comm.rank]
        arrival = self.link.post(wire_bytes(out, from_peers, empty_messages=True), posted)
        self.comm.all_to_all_single(out, inp, out_splits, in_splits)
        self.link.wait_until(arrival)

    def __getattr__(self, name: str):
        return getattr(self.comm, name)
