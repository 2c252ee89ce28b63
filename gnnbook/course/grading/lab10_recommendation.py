"""Lab 10's checks (``labs/lab10_recommendation.ipynb``): the BPR loss and one LightGCN propagation step.

Book: none (industry lab; he2020lightgcn, rendle2009bpr).

Used in: labs/lab10_recommendation.ipynb.

:func:`check_bpr_loss` sends scores of its own (hand-made values, margins past ``exp``'s range) to the
student's ``my_bpr_loss`` (in the autograder a sandboxed process, here the notebook) and compares the
loss and the gradient that come back with ``softplus(-margin)`` in float64, computed here.
:func:`check_propagate` sends the training graph and random user-item graphs of its own to
``my_propagate`` and compares the result with PyG's ``LGConv``, run here.

Example:
    >>> float(expected_bpr(torch.zeros(4), torch.zeros(4))[0])    # equal scores: log 2
    0.6931471805599453
    >>> check_bpr_loss(Here(globals()))                          # doctest: +SKIP
    {'score_sets': 4}
"""
from __future__ import annotations

from typing import Any

import torch
from torch_geometric.nn import LGConv

from ...applications.recsys import split_interactions
from ...data import load_ratings
from ..vetting import Policy
from .engine import Check
from .student import LAB10_PRELUDE, Here

__all__ = ["CHECKS", "Here", "POLICY", "PRELUDE", "check_bpr_loss", "check_propagate", "expected_bpr"]

PRELUDE = LAB10_PRELUDE
POLICY = Policy(modules=("torch", "math", "numpy"),
                references=("BPRLoss", "LGConv", "LightGCN", "get_laplacian", "gcn_norm", "GCNConv", "GraphConv",
                            "SGConv", "TAGConv", "APPNPConv", "EdgeWeightNorm", "bpr_loss", "lightgcn_propagate"))


def expected_bpr(positive: torch.Tensor, negative: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The BPR loss ``mean(-log sigmoid(positive - negative))`` as ``softplus(-margin)`` in float64, and its
    gradient with respect to ``positive``."""
    margin = (positive - negative).double()
    return torch.nn.functional.softplus(-margin).mean(), (-torch.sigmoid(-margin) / margin.numel()).float()


def check_bpr_loss(student, thorough: bool = False) -> dict[str, Any]:
    """Task 1: log 2 for a tie, a finite 200 for a margin of -200, ~0 for a large right margin, the loss and
    its gradient on the check's own scores, and ValueError for scores of different shapes."""
    generator = torch.Generator().manual_seed(5)
    scores = [(torch.zeros(4), torch.zeros(4)), (torch.tensor([-200.0]), torch.tensor([0.0])),
              (torch.tensor([50.0]), torch.tensor([0.0])),
              (torch.tensor([1.0, -0.5, 2.0]), torch.tensor([0.0, 0.5, 2.5])),
              # margins past exp's range
              (torch.randn(64, generator=generator) * 40, torch.randn(64, generator=generator))]
    if thorough:
        scores += [(torch.randn(3, 7, generator=generator) * 120, torch.randn(3, 7, generator=generator) * 120),
                   (torch.tensor([-1e4, 1e4, 0.5, -88.0]), torch.tensor([0.0, -3.0, 0.5, 1.0]))]
    calls = [("lab10.bpr", {"positive": p, "negative": n}) for p, n in scores]
    calls.append(("lab10.bpr_error", {"positive": torch.zeros(3), "negative": torch.zeros(4)}))
    *replies, mismatch = student.run(calls)
    for (positive, negative), r in zip(scores, replies):
        where = f"{tuple(positive.shape)} scores (margins {float((positive - negative).min()):.3g} to " \
                f"{float((positive - negative).max()):.3g})"
        want, grad = expected_bpr(positive, negative)
        loss = r["loss"]
        assert loss.shape == () and bool(torch.isfinite(loss)), f"{where}: one finite number, got {loss}"
        assert abs(float(loss) - float(want)) <= 1e-4 * max(1.0, float(want)), \
            f"{where}: loss {float(loss)}, expected {float(want)} (-log sigmoid(positive - negative), averaged)"
        assert r["grad"] is not None and r["grad"].shape == grad.shape and torch.allclose(r["grad"], grad, atol=1e-6), \
            f"{where}: the gradient with respect to positive differs from -sigmoid(-margin) / n"
    assert mismatch == "ValueError", f"scores of different shapes must raise ValueError (got {mismatch or 'no error'})"
    return {"score_sets": len(scores)}


def _random_interactions(users: int, items: int, edges: int, generator: torch.Generator) -> tuple[torch.Tensor, int]:
    """A random user-item graph (users first, then items; both directions): uneven degrees, a repeated pair now
    and then, and the last two users and items without an edge."""
    pairs = torch.stack([torch.randint(users - 2, (edges,), generator=generator),
                         users + torch.randint(items - 2, (edges,), generator=generator)])
    return torch.cat([pairs, pairs.flip(0)], 1), users + items


def check_propagate(student, thorough: bool = False) -> dict[str, Any]:
    """Task 2: on a hand-made path graph with an isolated node, on the shipped ratings' training graph and on
    random user-item graphs, one step equals PyG's ``LGConv`` (run here)."""
    generator = torch.Generator().manual_seed(1)
    split = split_interactions(load_ratings("ml-latest-small"), seed=0)
    graphs = {"a path 0 - 1 - 2 and an isolated node 3": (torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), 4),
              "the training graph": (split.edge_index(), split.num_users + split.num_items),
              "a random graph of 20 users and 30 items": _random_interactions(20, 30, 150, generator)}
    if thorough:
        graphs["a second random graph"] = _random_interactions(200, 90, 700, generator)
        graphs["a third random graph"] = _random_interactions(5, 4, 3, generator)
    inputs = {name: (edge_index, torch.randn(n, 16, generator=generator)) for name, (edge_index, n) in graphs.items()}
    replies = student.run([("lab10.propagate", {"edge_index": e, "h": h}) for e, h in inputs.values()])
    for (name, (edge_index, h)), mine in zip(inputs.items(), replies):
        theirs = LGConv()(h, edge_index)
        assert isinstance(mine, torch.Tensor) and mine.shape == theirs.shape, \
            f"{name}: return a tensor of shape {tuple(theirs.shape)}, got {tuple(getattr(mine, 'shape', ()))}"
        gap = float((mine - theirs).abs().max())
        assert gap < 1e-5, f"{name}: differs from PyG's LGConv by {gap}: D^-1/2 A D^-1/2 h, isolated nodes get 0"
    return {"graphs": len(inputs), "training_edges": int(graphs["the training graph"][0].shape[1])}


CHECKS = (Check(1, "the BPR loss: values, stability, gradient and a clear error for mismatched shapes", check_bpr_loss),
          Check(2, "one propagation step equals PyG's LGConv", check_propagate))
