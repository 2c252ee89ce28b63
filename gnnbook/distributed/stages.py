"""Where a distributed training step spends its time (book section 5.1), and
how many of its sampled neighbours live on another machine (section 5.3.2).

Book: 5.1 naive minibatch distributed training (where a step's time goes).

Used in: chapters/05a_minibatch_training_and_sampling.ipynb.

A step of the DistDGL trainer has six stages, timed one after the other with
:class:`StageClock`: ``sample`` (the minibatch's blocks, by RPC to the servers
that own the seeds), ``fetch`` (its input features and labels: local rows from
shared memory, remote ones by RPC), ``forward``, ``backward``, ``allreduce``
(the gradients averaged over all trainers) and ``optimizer``.  DDP would
overlap the all-reduce with the backward pass, so that neither could be timed
on its own; :func:`start_allreduce` starts it after the backward pass instead,
as one all-reduce of all gradients flattened into one tensor (the same
average), and the trainer samples its next minibatch while it runs (5.2.1's
idea: the next minibatch does not depend on this step's update).  So
``allreduce`` is the part of the all-reduce the sampling did not hide: mostly
waiting for the slowest trainer.

Example:
    >>> clock = StageClock()
    >>> with clock("forward"):
    ...     _ = sum(range(1000))
    >>> sorted(clock.take())[:2], clock.take()["forward"]
    (['allreduce', 'backward'], 0.0)
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

STAGES = ("sample", "fetch", "forward", "backward", "allreduce", "optimizer")


class StageClock:
    """Seconds spent in each of :data:`STAGES`, added up until :meth:`take`."""

    def __init__(self):
        self.seconds = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start

    def take(self) -> dict[str, float]:
        """The seconds per stage since the last call, then zero."""
        seconds, self.seconds = self.seconds, dict.fromkeys(STAGES, 0.0)
        return seconds


def start_allreduce(parameters: list[torch.nn.Parameter], world_size: int) -> Callable[[], None]:
    """Start averaging the gradients of ``parameters`` over all ranks, as one all-reduce (gloo) of their
    concatenation, and return the function that waits for it and writes the averages back.  Between the
    two the trainer samples its next minibatch: the all-reduce needs no CPU of the trainer's while it waits
    on the other ranks, and the sampling needs no new weights.  A parameter without a gradient contributes
    zeros, as DDP's does."""
    import torch.distributed as dist

    if world_size == 1:  # one trainer: its gradients are the average already
        return lambda: None
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
    flat = torch.cat([g.reshape(-1) for g in grads])
    work = dist.all_reduce(flat, async_op=True)

    def finish() -> None:
        work.wait()
        flat.div_(world_size)
        offset = 0
        for p, g in zip(parameters, grads):
            if p.grad is None:
                p.grad = g
            p.grad.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
    return finish


def owner_lookup(book) -> Callable[[torch.Tensor], torch.Tensor]:
    """``book.nid2partid``, made cheap for the per-step counts.  After DGL's partitioning each partition's nodes
    are one contiguous range of new ids, so a node's owner is the number of partition starts at or below it:
    K - 1 comparisons (K small) instead of the book's numpy search and copies.  Any other book (a range that
    is not contiguous) keeps its own lookup.

    Example:
        >>> class Book:  # two partitions: ids 0-2 and 3-4
        ...     num_partitions = lambda self: 2
        ...     partid2nids = lambda self, p: torch.arange(3) if p == 0 else torch.arange(3, 5)
        >>> owner_lookup(Book())(torch.tensor([4, 0, 3])).tolist()
        [1, 0, 1]
    """
    ranges = [book.partid2nids(p) for p in range(book.num_partitions())]
    starts = [int(r.min()) if len(r) else None for r in ranges]
    contiguous = all(len(r) and int(r.max()) - int(r.min()) + 1 == len(r) for r in ranges) and starts == sorted(starts)
    if not contiguous or starts[0] != 0 or len(ranges) > 16:
        return book.nid2partid
    bounds = starts[1:]

    def owner_of(ids: torch.Tensor) -> torch.Tensor:
        owner = torch.zeros(len(ids), dtype=torch.int8)
        for start in bounds:
            owner += ids >= start
        return owner

    return owner_of


def count_remote_neighbours(blocks, owner_of: Callable[[torch.Tensor], torch.Tensor],
                            own_part: int) -> tuple[int, int, int]:
    """(sampled neighbours, those on another machine than the node that sampled
    them, those on another machine than the trainer) over all edges of
    ``blocks``.  An edge's source is the neighbour sampled for its destination,
    on the machine that owns the destination; the first kind of remote is what
    partitioning controls (random: about 1 - 1/K), the second what the trainer
    then fetches remotely (lower: a seed's neighbours link back to the seed,
    which is always local).  Self-loops (the partitioned graph has one per node)
    are the node itself, not a neighbour, and are left out."""
    import dgl

    sampled = crossing = remote = 0
    for block in blocks:
        src, dst = block.edges()
        # A block's destination nodes are the first of its source nodes (DGL's to_block), so one owner lookup per
        # source node serves both ends, and an edge is a self-loop exactly when src == dst.  Owners as int8: the
        # per-edge reads move an eighth of the bytes (a block has 10-25x more edges than nodes).
        owner = owner_of(block.srcdata[dgl.NID]).to(torch.int8)
        src_owner, dst_owner = owner[src], owner[dst]
        loop, away = src == dst, src_owner != own_part
        sampled += len(src) - int(loop.sum())
        crossing += int((src_owner != dst_owner).sum())  # a self-loop's two ends have one owner
        remote += int(away.sum()) - int((loop & away).sum())
    return sampled, crossing, remote
