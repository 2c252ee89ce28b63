"""Expert parallelism: a mixture-of-experts layer with top-1 gating, one
expert per rank.  Every rank holds the (replicated) gate and its own tokens;
the gate picks one expert per token; tokens are sorted by expert and sent to
the expert's rank with ``all_to_all_single`` (after an all-to-all of the
counts, so each rank knows how much it will receive); each expert runs its
feed-forward network; a second all-to-all brings the results home, where they
are put back in order and scaled by the gate probability.

Book: 3.3.5 mixture-of-experts parallelism.

Used in: chapters/03_distributed_ml.ipynb.

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.ch3_parallel.expert_parallel:moe_expert_parallel", 2, {"tokens": 8, "d": 4, "hidden": 8})
    >>> ref = moe_single(world_size=2, tokens=8, d=4, hidden=8)
    >>> bool(torch.allclose(torch.cat([o.y for o in out]), ref["y"], atol=1e-5))
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..base.records import record
from ..comm.collectives import Comm


@record
@dataclass
class ExpertRank:
    """What one rank of :func:`moe_expert_parallel` computed for its tokens, and the bytes it moved."""

    y: torch.Tensor  # its tokens' outputs, in their original order, scaled by the gate probability
    expert: torch.Tensor  # the expert the gate chose for each of its tokens
    send_counts: torch.Tensor  # how many of its tokens went to each expert (rank)
    comm: dict[str, Any]  # Comm.summary() of the three all-to-alls


def make_moe(num_experts: int, d: int, hidden: int, seed: int = 0) -> tuple[nn.Linear, list[nn.Sequential]]:
    torch.manual_seed(seed)
    gate = nn.Linear(d, num_experts)
    experts = [nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d)) for _ in range(num_experts)]
    return gate, experts


def make_tokens(rank: int, tokens: int, d: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(tokens, d, generator=torch.Generator().manual_seed(seed * 1000 + rank + 1))


def top1(gate: nn.Linear, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(gate(x), dim=-1)
    weight, expert = probs.max(dim=-1)
    return expert, weight


@torch.no_grad()
def moe_single(world_size: int, tokens: int = 64, d: int = 32, hidden: int = 64, seed: int = 0) -> dict[str, Any]:
    """One process with all experts and all ranks' tokens (in rank order)."""
    gate, experts = make_moe(world_size, d, hidden, seed)
    x = torch.cat([make_tokens(r, tokens, d, seed) for r in range(world_size)])
    expert, weight = top1(gate, x)
    y = torch.zeros_like(x)
    for e in range(world_size):
        chosen = expert == e
        y[chosen] = experts[e](x[chosen])
    return {"y": y * weight[:, None], "expert": expert}


@torch.no_grad()
def moe_expert_parallel(tokens: int = 64, d: int = 32, hidden: int = 64, seed: int = 0) -> ExpertRank:
    """This rank's tokens through the distributed MoE; returns an :class:`ExpertRank`: its outputs,
    the token counts it sent to each expert, and the bytes it moved."""
    rank, world = dist.get_rank(), dist.get_world_size()
    gate, experts = make_moe(world, d, hidden, seed)
    my_expert = experts[rank]  # the others' weights are built only to keep the seeded init identical
    x = make_tokens(rank, tokens, d, seed)
    expert, weight = top1(gate, x)
    order = torch.argsort(expert, stable=True)
    send_counts = torch.bincount(expert, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    comm = Comm()
    comm.all_to_all_single(recv_counts, send_counts)                  # how many tokens each rank sends me
    in_splits, out_splits = send_counts.tolist(), recv_counts.tolist()
    received = torch.empty(sum(out_splits), d)
    comm.all_to_all_single(received, x[order].contiguous(), out_splits, in_splits)   # dispatch
    processed = my_expert(received)
    returned = torch.empty(tokens, d)
    comm.all_to_all_single(returned, processed, in_splits, out_splits)               # combine
    y = torch.empty_like(x)
    y[order] = returned
    return ExpertRank(y=y * weight[:, None], expert=expert, send_counts=send_counts, comm=comm.summary())
