"""GCN's symmetric normalisation ``D^-1/2 A D^-1/2``, the one implementation the package uses.

Book: 2.3 GCN (the normalised adjacency); used again by 5.2.3, 5.3, 6.1, 6.2 and the applications.

Used in: no notebook directly.

An edge ``u -> v`` weighs ``out_deg(u)^-1/2 * in_deg(v)^-1/2`` (DGL's ``GraphConv(norm="both")``); a
node of degree 0 gets the factor 0 instead of ``inf`` (it has no edge to weigh, and a dense matrix
keeps its zero row).  Every factor is float32, and each side's factor is computed on its own before the
product: ``rsqrt(a) * rsqrt(b)`` and ``rsqrt(a * b)`` differ in the last bit of about half the edges, so
all callers share this one order.

Example:
    >>> import torch
    >>> src, dst = torch.tensor([0, 0, 1]), torch.tensor([1, 2, 2])
    >>> gcn_edge_weights(src, dst, torch.tensor([4, 1, 0]), torch.tensor([0, 1, 4])).tolist()
    [0.5, 0.25, 0.5]
"""
from __future__ import annotations

import torch

__all__ = ["inverse_sqrt_degrees", "gcn_edge_weights", "gcn_dense_adjacency"]


def inverse_sqrt_degrees(degrees: torch.Tensor) -> torch.Tensor:
    """``deg^-1/2`` per node as float32 (the diagonal of ``D^-1/2``), 0 where the degree is 0.

    Example:
        >>> inverse_sqrt_degrees(torch.tensor([4, 0, 1])).tolist()
        [0.5, 0.0, 1.0]
    """
    degrees = degrees.float()
    return torch.where(degrees > 0, degrees.rsqrt(), torch.zeros_like(degrees))


def gcn_edge_weights(src: torch.Tensor, dst: torch.Tensor, out_degrees: torch.Tensor,
                     in_degrees: torch.Tensor) -> torch.Tensor:
    """The weight of each edge ``src[i] -> dst[i]``: ``out_degrees[src]^-1/2 * in_degrees[dst]^-1/2``.

    The degrees are whatever the caller's GCN counts (with or without self-loops, of the whole graph or of
    a batch); pass the same tensor twice for an undirected graph's ``deg(u)^-1/2 deg(v)^-1/2``.

    Example:
        >>> gcn_edge_weights(torch.tensor([0]), torch.tensor([1]), torch.tensor([1, 0]), torch.tensor([0, 4])).tolist()
        [0.5]
    """
    return inverse_sqrt_degrees(out_degrees)[src] * inverse_sqrt_degrees(in_degrees)[dst]


def gcn_dense_adjacency(adjacency: torch.Tensor) -> torch.Tensor:
    """``D^-1/2 A D^-1/2`` of a dense symmetric (possibly weighted) ``adjacency``, ``D`` its row sums, float32.

    Add the self-loops first if the model wants them (``A + I``).

    Example:
        >>> gcn_dense_adjacency(torch.tensor([[0., 1.], [1., 0.]])).tolist()
        [[0.0, 1.0], [1.0, 0.0]]
    """
    adjacency = adjacency.float()
    norm = inverse_sqrt_degrees(adjacency.sum(1))
    return norm[:, None] * adjacency * norm[None, :]
