"""Graph recommendation: LightGCN against matrix factorisation, BPR, recall@k and NDCG@k.

Book: 2.4 applications (recommendation), beyond the book.

Used in: labs/lab10_recommendation.ipynb.

Interactions are implicit feedback: every rating is an interaction, whatever
its stars.  :func:`split_interactions` splits each user's interactions at
random into train / validation / test (80/10/10 by default).  NGCF (wang2019ngcf)
and LightGCN (he2020lightgcn; He et al., SIGIR 2020) split each user's interactions 80% train / 20% test and
draw validation from the training part; a separate validation share keeps model
selection off the test interactions.  Items rated by a user in training are
never recommended to that user again when ranking.

Both rankers are trained the same way: BPR (Rendle et al., UAI 2009) with one
uniformly sampled negative item per training interaction, Adam, an L2 penalty
on the embeddings of the batch, and the epoch with the best validation
recall@k kept (its test metrics are reported).

Example:
    >>> from gnnbook.data import load_ratings
    >>> split = split_interactions(load_ratings("ml-latest-small"), seed=0)  # doctest: +SKIP
    >>> run = fit_ranker(LightGCNRanker(split, dim=64, layers=3), split, Optim(epochs=20))  # doctest: +SKIP
    >>> run["test"]["recall"] > 0.1                                          # doctest: +SKIP
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..data.movielens import Ratings
from ..graph.normalisation import gcn_edge_weights
from ..training.train import BestEpoch, Optim


@dataclass(frozen=True)
class InteractionSplit:
    """Train / validation / test interactions as ``[2, n]`` (user, item) tensors."""

    num_users: int
    num_items: int
    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor

    def edge_index(self) -> torch.Tensor:
        """The training graph for PyG: users ``0..U-1``, items ``U..U+I-1``, both directions."""
        users, items = self.train[0], self.train[1] + self.num_users
        return torch.stack([torch.cat([users, items]), torch.cat([items, users])])

    def seen(self, *parts: str) -> torch.Tensor:
        """A ``[users, items]`` boolean matrix of the interactions in ``parts`` (e.g. ``"train"``)."""
        mask = torch.zeros(self.num_users, self.num_items, dtype=torch.bool)
        for part in parts:
            pairs = getattr(self, part)
            mask[pairs[0], pairs[1]] = True
        return mask


def split_interactions(ratings: Ratings, val_share: float = 0.1, test_share: float = 0.1,
                       seed: int = 0) -> InteractionSplit:
    """Split each user's interactions at random: ``test_share`` to test, ``val_share`` to
    validation (each at least one), the rest to training.

    Example:
        >>> split = split_interactions(ratings, seed=0)          # doctest: +SKIP
        >>> split.train.shape[1] + split.val.shape[1] + split.test.shape[1] == ratings.num_ratings  # doctest: +SKIP
        True
    """
    if not (0 < val_share < 1 and 0 < test_share < 1 and val_share + test_share < 1):
        raise ValueError(f"val_share={val_share} and test_share={test_share} must be in (0, 1) and sum below 1")
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(ratings.num_ratings, generator=generator)
    # a stable sort by user keeps each user's interactions in the random order
    order = order[torch.sort(ratings.user[order], stable=True).indices]
    users = ratings.user[order]
    counts = torch.bincount(users, minlength=ratings.num_users)
    if int(counts[counts > 0].min()) < 3:
        raise ValueError("every user needs at least 3 interactions (one each for train, validation and test)")
    first = torch.cumsum(counts, 0) - counts
    rank = torch.arange(len(order)) - first[users]  # position of each interaction within its user
    n_test = torch.clamp((counts * test_share).round().long(), min=1)[users]
    n_val = torch.clamp((counts * val_share).round().long(), min=1)[users]
    pairs = torch.stack([users, ratings.item[order]])
    return InteractionSplit(ratings.num_users, ratings.num_items,
                            train=pairs[:, rank >= n_test + n_val],
                            val=pairs[:, (rank >= n_test) & (rank < n_test + n_val)],
                            test=pairs[:, rank < n_test])


class MatrixFactorisation(nn.Module):
    """One embedding per user and per item; the score is their dot product."""

    def __init__(self, split: InteractionSplit, dim: int = 64):
        super().__init__()
        self.users = nn.Embedding(split.num_users, dim)
        self.items = nn.Embedding(split.num_items, dim)
        nn.init.normal_(self.users.weight, std=0.1)
        nn.init.normal_(self.items.weight, std=0.1)

    def embeddings(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(user embeddings, item embeddings) used for scoring."""
        return self.users.weight, self.items.weight

    def layer0(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The trainable embeddings (what the L2 penalty applies to)."""
        return self.users.weight, self.items.weight


def normalised_adjacency(split: InteractionSplit) -> torch.Tensor:
    """LightGCN's propagation matrix ``D^-1/2 A D^-1/2`` of the training graph (users then
    items, no self-loops) as a sparse CSR tensor, built once."""
    edge_index = split.edge_index()
    n = split.num_users + split.num_items
    degree = torch.bincount(edge_index[0], minlength=n)     # both directions stored: in = out
    values = gcn_edge_weights(edge_index[0], edge_index[1], degree, degree)
    return torch.sparse_coo_tensor(edge_index, values, (n, n)).coalesce().to_sparse_csr()


class _SymmetricSpMM(torch.autograd.Function):
    """``A @ h`` for a symmetric sparse ``A``: the gradient is ``A @ grad`` too, which spares
    torch from transposing the CSR matrix at every backward pass (the slow part here)."""

    @staticmethod
    def forward(ctx, adjacency, h):
        ctx.adjacency = adjacency
        return torch.sparse.mm(adjacency, h)

    @staticmethod
    def backward(ctx, grad):
        return None, torch.sparse.mm(ctx.adjacency, grad)


def lightgcn_propagate(adjacency: torch.Tensor, embeddings: torch.Tensor, layers: int) -> torch.Tensor:
    """LightGCN's output: the mean of ``E, A E, ..., A^layers E`` (no weights, no nonlinearity);
    ``adjacency`` must be symmetric, as :func:`normalised_adjacency`'s is."""
    out, h = embeddings, embeddings
    for _ in range(layers):
        h = _SymmetricSpMM.apply(adjacency, h)
        out = out + h
    return out / (layers + 1)


class LightGCNRanker(nn.Module):
    """LightGCN (He et al., SIGIR 2020) on the training graph: layer-0 embeddings propagated
    ``layers`` times with the normalised adjacency, averaged.  The same function as PyG's
    ``LightGCN.get_embedding`` (tests/test_recsys.py checks it), with the matrix built once
    instead of at every call, which makes a step about ten times faster here."""

    def __init__(self, split: InteractionSplit, dim: int = 64, layers: int = 3):
        super().__init__()
        self.num_users, self.layers = split.num_users, layers
        self.embedding = nn.Embedding(split.num_users + split.num_items, dim)
        nn.init.normal_(self.embedding.weight, std=0.1)
        self.adjacency = normalised_adjacency(split)

    def embeddings(self) -> tuple[torch.Tensor, torch.Tensor]:
        out = lightgcn_propagate(self.adjacency, self.embedding.weight, self.layers)
        return out[:self.num_users], out[self.num_users:]

    def layer0(self) -> tuple[torch.Tensor, torch.Tensor]:
        weight = self.embedding.weight
        return weight[:self.num_users], weight[self.num_users:]


def bpr_loss(positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """Bayesian personalised ranking: ``mean(-log sigmoid(positive - negative))``.

    Example:
        >>> round(float(bpr_loss(torch.tensor([0.0]), torch.tensor([0.0]))), 6)  # -log(1/2)
        0.693147
    """
    if positive.shape != negative.shape:
        raise ValueError(f"positive {tuple(positive.shape)} and negative {tuple(negative.shape)} scores differ "
                         "in shape")
    return -torch.nn.functional.logsigmoid(positive - negative).mean()


def sample_negatives(users: torch.Tensor, seen: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One item per user drawn uniformly among the items that user has not interacted with."""
    items = torch.randint(seen.shape[1], users.shape, generator=generator)
    clash = seen[users, items]
    while bool(clash.any()):  # redraw the few that hit an interaction
        items[clash] = torch.randint(seen.shape[1], (int(clash.sum()),), generator=generator)
        clash = seen[users, items]
    return items


def rank_metrics(user_emb: torch.Tensor, item_emb: torch.Tensor, targets: torch.Tensor, exclude: torch.Tensor,
                 k: int = 20) -> dict[str, float]:
    """Recall@k and NDCG@k over the users that have targets.

    ``targets`` are the held-out (user, item) pairs, ``exclude`` a ``[users, items]`` mask of
    interactions never to recommend (the training ones).  Recall@k = hits in the top k / the user's
    held-out items; NDCG@k = DCG of the hits / the best DCG possible with that many items.

    Example:
        >>> u, i = torch.eye(2), torch.eye(2)                 # user 0 likes item 0 best
        >>> rank_metrics(u, i, torch.tensor([[0], [0]]), torch.zeros(2, 2, dtype=torch.bool), k=1)
        {'recall': 1.0, 'ndcg': 1.0}
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    relevant = torch.zeros_like(exclude)
    relevant[targets[0], targets[1]] = True
    users = torch.nonzero(relevant.any(1)).flatten()
    with torch.no_grad():
        scores = user_emb[users] @ item_emb.T
        scores = scores.masked_fill(exclude[users], -math.inf)
        top = torch.topk(scores, min(k, scores.shape[1]), dim=1).indices
    hits = torch.gather(relevant[users], 1, top).float()
    counts = relevant[users].sum(1).float()
    discount = 1.0 / torch.log2(torch.arange(2, top.shape[1] + 2).float())
    ideal = torch.cumsum(discount, 0)[(torch.clamp(counts, max=top.shape[1]) - 1).long()]
    return {"recall": float((hits.sum(1) / counts).mean()), "ndcg": float(((hits * discount).sum(1) / ideal).mean())}


def fit_ranker(model: nn.Module, split: InteractionSplit, optim: Optim | None = None, batch_size: int = 2048,
               l2: float = 1e-4, k: int = 20, eval_every: int = 1) -> dict:
    """Train ``model`` (a :class:`MatrixFactorisation` or :class:`LightGCNRanker`) with BPR; keep
    the epoch with the best validation recall@k.  ``optim`` gives the seed, Adam's learning rate (None:
    0.01) and the epochs (None: 20), every one of which runs (no early stopping: its patience and weight decay
    are unused; ``l2`` is BPR's penalty on the batch's embeddings).  Returns the per-epoch losses and
    validation recall, the best epoch, and its ``val`` and ``test`` metrics."""
    optim = (optim or Optim()).with_defaults(lr=0.01, epochs=20)
    epochs, lr, seed = optim.epochs, optim.lr, optim.seed
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs ({epochs}) and batch_size ({batch_size}) must be at least 1")
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    seen_train, seen_known = split.seen("train"), split.seen("train", "val")
    history: dict = {"loss": [], "val_recall": [], "best_epoch": -1}
    best = BestEpoch(patience=epochs)  # selection only: every epoch runs
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(split.train.shape[1], generator=generator)
        total = 0.0
        for start in range(0, len(order), batch_size):
            users, positives = split.train[:, order[start:start + batch_size]]
            negatives = sample_negatives(users, seen_train, generator)
            user_emb, item_emb = model.embeddings()
            u = user_emb[users]
            loss = bpr_loss((u * item_emb[positives]).sum(1), (u * item_emb[negatives]).sum(1))
            users0, items0 = model.layer0()
            penalty = (users0[users].pow(2).sum() + items0[positives].pow(2).sum() + items0[negatives].pow(2).sum())
            optimizer.zero_grad()
            (loss + l2 * penalty / (2 * len(users))).backward()
            optimizer.step()
            total += float(loss) * len(users)
        history["loss"].append(total / len(order))
        if (epoch + 1) % eval_every == 0 or epoch == epochs - 1:
            model.eval()
            with torch.no_grad():
                recall = rank_metrics(*model.embeddings(), split.val, seen_train, k)["recall"]
            history["val_recall"].append((epoch + 1, recall))
            best.update(model, epoch + 1, recall)
    history["best_epoch"] = best.epoch
    best.restore(model)
    with torch.no_grad():
        user_emb, item_emb = model.embeddings()
        history["val"] = rank_metrics(user_emb, item_emb, split.val, seen_train, k)
        history["test"] = rank_metrics(user_emb, item_emb, split.test, seen_known, k)
    return history


def pinsage_neighbours(split: InteractionSplit, items: torch.Tensor, num_neighbours: int = 10,
                       num_random_walks: int = 1000, num_traversals: int = 3, termination_prob: float = 0.5,
                       seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """PinSAGE's neighbourhoods (Ying et al., KDD 2018) with DGL's ``PinSAGESampler``: from each
    item, ``num_random_walks`` restarting walks item -> user -> item (at most ``num_traversals``
    hops of two steps, stopping with ``termination_prob`` after each), and the
    ``num_neighbours`` items visited most often (the item itself left out); the visit counts
    are the importance weights.

    Returns ``(neighbours, weights)``, both ``[len(items), num_neighbours]`` sorted by weight
    (-1 and 0 where an item has fewer neighbours).

    Example:
        >>> nbrs, weights = pinsage_neighbours(split, torch.tensor([0, 1]), num_neighbours=5)  # doctest: +SKIP
        >>> nbrs.shape                                                                        # doctest: +SKIP
        torch.Size([2, 5])
    """
    import dgl

    users, rated = split.train
    graph = dgl.heterograph({("user", "rates", "item"): (users, rated), ("item", "rated-by", "user"): (rated, users)},
                            num_nodes_dict={"user": split.num_users, "item": split.num_items})
    sampler = dgl.sampling.PinSAGESampler(graph, "item", "user", num_traversals, termination_prob,
                                          num_random_walks, num_neighbours + 1)
    dgl.seed(seed)
    frontier = sampler(items)  # edges neighbour -> item (item ids), visit counts in edata["weights"]
    src, dst = frontier.edges()
    weights = frontier.edata["weights"].float()
    neighbours = torch.full((len(items), num_neighbours), -1, dtype=torch.long)
    ranked = torch.zeros(len(items), num_neighbours)
    for row in range(len(items)):
        mine = torch.nonzero((dst == items[row]) & (src != items[row])).flatten()  # walks also return home
        order = torch.argsort(weights[mine], descending=True, stable=True)[:num_neighbours]
        neighbours[row, :len(order)], ranked[row, :len(order)] = src[mine[order]], weights[mine[order]]
    return neighbours, ranked
