"""All-reduce built from point-to-point messages three ways (book 5.5.1), and message fusion.

Book: 5.5.1 collective communication (direct, tree, ring; message fusion).

Used in: chapters/05d_communication.ipynb.

Each function takes a tensor and a communicator with ``send`` / ``recv`` /
``isend`` (:class:`gnnbook.comm.point_to_point.PointToPoint`, whose bytes are
measured on the sockets) and sums the tensor over all ranks in place:

* :func:`direct_all_reduce`: every rank sends its whole tensor to every other
  rank; ``(N-1) * S`` bytes out of each rank, one round;
* :func:`tree_all_reduce`: a binomial tree reduces to rank 0 in ``ceil(log2 N)``
  rounds, then broadcasts back down the same tree; ``2 (N-1) S`` bytes in
  total, but rank 0 sends and receives ``ceil(log2 N)`` whole tensors;
* :func:`ring_all_reduce`: reduce-scatter then all-gather around a ring,
  ``2 (N-1)`` rounds of ``S / N`` bytes, so ``2 (N-1)/N * S`` bytes out of every
  rank, the bandwidth-optimal amount (what gloo's own all-reduce does).

:func:`fusion_seconds` times many small all-reduces against one all-reduce of
their concatenation (message fusion: one start-up latency instead of many).

Example (in each rank of ``gnnbook.base.launch.run``):
    >>> from gnnbook.base.launch import run
    >>> rows = run("gnnbook.course.grading.lab03_collectives:check_all_reduce", 2,
    ...            {"impl": "gnnbook.comm.algorithms:tree_all_reduce", "sizes": [10]})
    >>> rows[0][0]["max_error"] < 1e-5
    True
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.distributed as dist

from ..base.records import record

ALGORITHMS = ("direct", "tree", "ring")


@record
@dataclass
class FusionTimes:
    """What one rank of :func:`fusion_seconds` measured, per number of tensors ``k``."""

    num_tensors: list[int]  # the k values, in order
    floats: int  # floats all-reduced in every round, whatever k
    seconds: list[float]  # median seconds of one round, per k
    wire_sent: list[int]  # bytes this rank's sockets sent for one more round, per k


def bytes_sent_formula(algorithm: str, size_bytes: int, world_size: int, rank: int) -> float:
    """Payload bytes rank ``rank`` sends in one all-reduce of ``size_bytes`` (the textbook count).

    Example:
        >>> bytes_sent_formula("ring", 4000, 4, 0)
        6000.0
    """
    n = world_size
    if algorithm == "direct":
        return float((n - 1) * size_bytes)
    if algorithm == "ring":
        return 2 * (n - 1) / n * size_bytes
    if algorithm == "tree":
        # up the tree: every rank but 0 sends once; down: a rank sends to each of its children
        return float(size_bytes * ((rank != 0) + len(_children(rank, n))))
    raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")


def sum_from_peers(outgoing: dict[int, torch.Tensor], like: torch.Tensor, comm) -> torch.Tensor:
    """Send ``outgoing[peer]`` to each of its peers, all at once, receive one
    ``like``-shaped tensor from each of the same peers (in peer order), and
    return the sum of what arrived.  Used by :func:`direct_all_reduce` and by
    P3's reduction of partial activations (:mod:`gnnbook.ch5_minibatch.p3`)."""
    requests = [comm.isend(t.detach().clone(), peer) for peer, t in outgoing.items()]
    total, incoming = torch.zeros_like(like), torch.empty_like(like)
    for peer in sorted(outgoing):
        comm.recv(incoming, peer)
        total += incoming
    for request in requests:
        request.wait()
    return total


def direct_all_reduce(tensor: torch.Tensor, comm) -> torch.Tensor:
    """Send the whole tensor to every peer, add what the peers sent."""
    peers = {peer: tensor for peer in range(comm.world_size) if peer != comm.rank}
    return tensor.add_(sum_from_peers(peers, tensor, comm))


def _children(rank: int, n: int) -> list[int]:
    # binomial tree rooted at 0: rank r's children are r + 2^k for every 2^k below r's lowest set bit
    children, step = [], 1
    while step < n:
        if rank % (2 * step) == 0 and rank + step < n:
            children.append(rank + step)
        elif rank % (2 * step) != 0:
            break
        step *= 2
    return children


def _parent(rank: int) -> int:
    return rank - (rank & -rank)  # clear the lowest set bit


def tree_all_reduce(tensor: torch.Tensor, comm) -> torch.Tensor:
    """Binomial-tree reduce to rank 0, then broadcast down the same tree."""
    rank, n = comm.rank, comm.world_size
    children = _children(rank, n)
    incoming = torch.empty_like(tensor)
    for child in children:              # leaves first: a child sends once its subtree is summed
        comm.recv(incoming, child)
        tensor += incoming
    if rank != 0:
        comm.send(tensor, _parent(rank))
        comm.recv(tensor, _parent(rank))
    for child in reversed(children):    # the largest subtree first: it has the longest way down
        comm.send(tensor, child)
    return tensor


def ring_all_reduce(tensor: torch.Tensor, comm) -> torch.Tensor:
    """Reduce-scatter around the ring (each rank ends owning one summed chunk), then all-gather."""
    rank, n = comm.rank, comm.world_size
    chunks = tensor.view(-1).tensor_split(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(n - 1):
            shift = step if phase == "reduce-scatter" else step - 1
            outgoing, target = chunks[(rank - shift) % n], chunks[(rank - shift - 1) % n]
            incoming = torch.empty_like(target)
            request = comm.isend(outgoing.clone(), right)   # send and receive at once: no rank waits on another
            comm.recv(incoming, left)
            request.wait()
            if phase == "reduce-scatter":
                target += incoming
            else:
                target.copy_(incoming)
    return tensor


def fusion_seconds(num_tensors: Sequence[int] = (1, 10, 100), total_floats: int = 25_600,
                   repeats: int = 7) -> FusionTimes:
    """Run in each rank: all-reduce ``total_floats`` floats split into ``k`` equal
    tensors, one collective each, for each ``k``; a :class:`FusionTimes` with the median seconds over ``repeats``.
    ``k = 1`` is the fused message.  Same bytes, ``k`` start-up latencies.  ``wire_sent``:
    the bytes this rank put on the sockets for one more, untimed, round of each ``k``
    (the same payload for every ``k``; gloo's headers grow with the messages)."""
    from .collectives import Comm

    comm = Comm()
    seconds, wire_sent = [], []
    for k in num_tensors:
        pieces = [torch.ones(total_floats // k) for _ in range(k)]
        runs = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            for piece in pieces:
                dist.all_reduce(piece)
            runs.append(time.perf_counter() - t0)
        seconds.append(sorted(runs)[len(runs) // 2])
        with comm.window(f"{k} tensors"):
            for piece in pieces:
                dist.all_reduce(piece)
        wire_sent.append(comm.windows[f"{k} tensors"][0])
    return FusionTimes(num_tensors=list(num_tensors), floats=total_floats, seconds=seconds, wire_sent=wire_sent)
