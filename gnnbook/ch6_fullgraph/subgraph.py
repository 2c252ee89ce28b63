"""Subgraph-parallel full-graph training with halo exchange (book 6.1.1).

Book: 6.1.1 subgraph-parallel full-graph training.

Used in: chapters/06a_fullgraph_parallelism.ipynb, chapters/06b_operator_parallelism.ipynb,
chapters/06c_sync_and_async_protocols.ipynb, labs/lab06_halo_exchange.ipynb.

The nodes are split into ``K`` parts (:mod:`gnnbook.ch6_fullgraph.partitioners`); process
``r`` holds its part's nodes, their in-edges, and the **halo**: the remote
in-neighbours of its nodes.  Every layer of a full-graph GCN or GraphSAGE
then needs the halo's current embeddings, so each layer

- **forward** sends the rows of its own nodes that peers hold as halo, and
  receives its halo rows (one ``all_to_all_single``), then aggregates locally;
- **backward** sends the gradient of every halo row back to the row's owner,
  which adds it to its own nodes' gradients (:class:`HaloExchange`, an
  autograd Function).

Every exchanged row is ``hidden`` floats wide: the first layer multiplies by
its weight *before* it exchanges (``A (X W) = (A X) W``), so raw features never
cross the wire.  Per epoch, summed over processes, the payload is therefore
``2 x layers x (sum of halo sizes) x hidden x 4`` bytes (forward and backward),
which :func:`halo_bytes_formula` prints and the sockets measure
(:class:`gnnbook.comm.collectives.Comm`); gloo adds 48-byte headers (3 per message, ``K-1``
messages each way per call, :mod:`gnnbook.comm.gloo_bytes`).  Weight gradients are
then all-reduced, as in data parallelism, so every process takes the same
optimiser step.  This is the scheme of NeuGraph / ROC / DistGNN-style systems
(e.g. Jia et al., ROC, MLSys 2020; Md et al., DistGNN, SC 2021).

:func:`train` runs in each of ``K`` real processes (:func:`run_subgraph`
launches them with :func:`gnnbook.base.launch.run`); :func:`reference` trains the
same model on the whole graph in one process with DGL's own layers.  Both use
the same initial weights and Adam, and no dropout (a dropout mask would have
to be drawn identically per node on every process), so the losses per epoch
and the final weights agree to float tolerance.

Example:
    >>> out = run_subgraph("cora", "gcn", num_parts=2, epochs=5)        # doctest: +SKIP
    >>> ref = reference("cora", "gcn", epochs=5)                        # doctest: +SKIP
    >>> max(abs(a - b) for a, b in zip(out[0].losses, ref.losses)) < 1e-4   # doctest: +SKIP
    True
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..base.records import record
from ..graph.normalisation import gcn_edge_weights
from ..training.train import adam_settings, correct_predictions

MODELS = ("gcn", "sage")


@record
@dataclass
class RankRun:
    """What one of :func:`train`'s K processes measured (:func:`run_subgraph` lists them in rank order)."""

    rank: int
    losses: list[float]  # the global training loss, per epoch
    halo_bytes_sent: list[int]  # measured on this process's sockets, per epoch
    gradient_bytes_sent: list[int]
    timeline: list[dict[str, float]]  # per epoch: compute_s, halo_s, allreduce_s
    owned: int  # nodes of this process's part
    halo: int  # remote in-neighbours it receives rows of
    halo_rows_sent: int
    halo_rows_received: int
    val_acc: float  # global accuracy after the last epoch (every process gives the same)
    test_acc: float
    weights: dict[str, torch.Tensor]  # final, identical on every process
    assignment: torch.Tensor  # every node's part
    all_to_all_calls: int
    all_to_all_payload_sent: int
    all_to_all_headers_sent: int


@dataclass
class ReferenceRun:
    """:func:`reference`'s one-process training: what each process of :func:`train` should match."""

    losses: list[float]
    weights: dict[str, torch.Tensor]
    val_acc: float
    test_acc: float


def prepare(graph, model: str):
    """The graph each model trains on: GCN adds self loops (``A + I``), GraphSAGE has none."""
    import dgl

    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
    graph = dgl.remove_self_loop(graph)
    return dgl.add_self_loop(graph) if model == "gcn" else graph


def init_weights(model: str, in_feats: int, hidden: int, num_classes: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded initial weights, ``(in, out)`` matrices and biases, for a two-layer model."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
    gen = torch.Generator().manual_seed(seed)

    def glorot(a: int, b: int) -> torch.Tensor:
        return (torch.rand(a, b, generator=gen) * 2 - 1) * (6 / (a + b)) ** 0.5

    if model == "gcn":
        return {"W1": glorot(in_feats, hidden), "b1": torch.zeros(hidden),
                "W2": glorot(hidden, num_classes), "b2": torch.zeros(num_classes)}
    return {"S1": glorot(in_feats, hidden), "N1": glorot(in_feats, hidden), "b1": torch.zeros(hidden),
            "S2": glorot(hidden, num_classes), "N2": glorot(hidden, num_classes), "b2": torch.zeros(num_classes)}


@dataclass
class LocalGraph:
    """What one process holds: its nodes, its halo, the aggregation matrix over both, and
    which of its rows each peer needs."""

    owned: torch.Tensor        # global ids of this part's nodes, ascending
    halo: torch.Tensor         # global ids of remote in-neighbours, by owner then id
    adjacency: torch.Tensor    # sparse (owned x (owned + halo)), normalised as the model wants
    send_index: torch.Tensor   # local rows to send, peer by peer
    send_counts: list[int]     # rows to each peer (0 to itself)
    recv_counts: list[int]     # halo rows from each peer


def local_graph(graph, assignment: torch.Tensor, rank: int, model: str) -> LocalGraph:
    """Part ``rank`` of ``graph`` (already :func:`prepare`-d) under ``assignment``.

    GCN weights an edge ``u -> v`` by ``1 / sqrt(out_deg(u) in_deg(v))``, GraphSAGE by
    ``1 / in_deg(v)`` (the mean); degrees are those of the whole graph."""
    n, k = graph.num_nodes(), int(assignment.max()) + 1
    owned = torch.nonzero(assignment == rank).flatten()
    src, dst = graph.in_edges(owned)
    remote = assignment[src] != rank
    halo = torch.unique(src[remote])
    halo = halo[torch.argsort(assignment[halo] * n + halo)]       # by owner, then id
    position = torch.full((n,), -1, dtype=torch.int64)
    position[owned] = torch.arange(len(owned))
    position[halo] = len(owned) + torch.arange(len(halo))
    if model == "gcn":
        value = gcn_edge_weights(src, dst, graph.out_degrees(), graph.in_degrees())
    else:
        value = 1.0 / graph.in_degrees().float()[dst]
    adjacency = torch.sparse_coo_tensor(torch.stack([position[dst], position[src]]), value,
                                        (len(owned), len(owned) + len(halo))).coalesce()
    # my nodes with an out-edge into peer j's part are in j's halo; ascending id, as j orders them
    my_src, my_dst = graph.out_edges(owned)
    sends = [torch.unique(my_src[assignment[my_dst] == j]) if j != rank else my_src[:0] for j in range(k)]
    return LocalGraph(owned, halo, adjacency, position[torch.cat(sends)],
                      [len(s) for s in sends], torch.bincount(assignment[halo], minlength=k).tolist())


@dataclass
class Plan:
    """Which rows one exchange call sends and receives (what :class:`HaloExchange` reads): the halo plan of
    a part, or a cheaper one that a protocol of :mod:`~gnnbook.ch6_fullgraph.protocols` makes."""

    send_index: torch.Tensor
    send_counts: list[int]
    recv_counts: list[int]


class HaloExchange(torch.autograd.Function):
    """Forward: own rows out, halo rows in.  Backward: halo gradients back to their owners,
    added to the owners' rows.  One ``all_to_all_single`` each way; ``seconds`` (a one-element
    list) adds up the time spent inside them."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, part: LocalGraph, comm, seconds: list) -> torch.Tensor:
        ctx.part, ctx.comm, ctx.seconds, ctx.rows = part, comm, seconds, h.shape[0]
        start = time.perf_counter()
        out = h.new_empty(sum(part.recv_counts), h.shape[1])
        comm.all_to_all_single(out, h[part.send_index].contiguous(), part.recv_counts, part.send_counts)
        seconds[0] += time.perf_counter() - start
        return out

    @staticmethod
    def backward(ctx, grad_halo: torch.Tensor):
        part = ctx.part
        start = time.perf_counter()
        grad_sent = grad_halo.new_empty(sum(part.send_counts), grad_halo.shape[1])
        ctx.comm.all_to_all_single(grad_sent, grad_halo.contiguous(), part.send_counts, part.recv_counts)
        ctx.seconds[0] += time.perf_counter() - start
        grad = grad_halo.new_zeros(ctx.rows, grad_halo.shape[1]).index_add_(0, part.send_index, grad_sent)
        return grad, None, None, None


def forward(model: str, w: dict[str, torch.Tensor], x: torch.Tensor, part: LocalGraph, comm,
            seconds: list) -> torch.Tensor:
    """Two layers on this process's nodes; each layer exchanges ``hidden``-wide halo rows."""
    def gather(h: torch.Tensor) -> torch.Tensor:             # own rows, then the halo's
        return torch.cat([h, HaloExchange.apply(h, part, comm, seconds)])

    a = part.adjacency
    if model == "gcn":
        h = torch.relu(torch.sparse.mm(a, gather(x @ w["W1"])) + w["b1"])
        return torch.sparse.mm(a, gather(h)) @ w["W2"] + w["b2"]
    h = torch.relu(x @ w["S1"] + torch.sparse.mm(a, gather(x @ w["N1"])) + w["b1"])
    return h @ w["S2"] + torch.sparse.mm(a, gather(h)) @ w["N2"] + w["b2"]


def halo_bytes_formula(halo_sizes: list[int], hidden: int, layers: int = 2) -> int:
    """Payload bytes of one epoch's halo exchange, summed over processes: every halo row of
    every layer once forward (embedding) and once backward (gradient), float32.

    Example:
        >>> halo_bytes_formula([100, 150], hidden=16)
        64000
    """
    return 2 * layers * sum(halo_sizes) * hidden * 4


@functools.lru_cache(maxsize=2)
def _prepared(dataset: str, model: str):
    # kept per process: a launch that runs several jobs one after another (run_sequence) loads once;
    # nothing here is modified in place by the trainers (each job makes fresh weights)
    from ..data import load_dataset

    graph = prepare(load_dataset(dataset), model)
    x, labels = graph.ndata["feat"].float(), graph.ndata["label"].long()
    # row-normalised bag-of-words features (Kipf & Welling's preprocessing): Amazon's raw counts
    # (row sums in the hundreds) push GraphSAGE's self term into dead ReLUs without dropout
    x = x / x.abs().sum(1, keepdim=True).clamp(min=1e-12)
    return graph, x, labels


def load_problem(dataset: str, model: str, hidden: int, seed: int):
    """The graph (prepared for ``model``), row-normalised features, labels and seeded weights every
    process starts from.  The graph, features and labels are loaded once per process and shared
    by later calls: do not modify them in place."""
    graph, x, labels = _prepared(dataset, model)
    w = init_weights(model, x.shape[1], hidden, int(labels.max()) + 1, seed)
    return graph, x, labels, w


def shared_assignment(graph, partitioner: str, seed: int, num_parts: int | None = None) -> torch.Tensor:
    """Rank 0 partitions into ``num_parts`` (default: one part per process), every rank receives the same
    assignment (before any Comm: not counted)."""
    import torch.distributed as dist

    from .partitioners import check_assignment, partition

    k = dist.get_world_size() if num_parts is None else num_parts
    if dist.get_rank() == 0:
        assignment = partition(graph, k, partitioner, seed)
    else:
        assignment = torch.empty(graph.num_nodes(), dtype=torch.int64)
    dist.broadcast(assignment, 0)
    check_assignment(graph.num_nodes(), assignment, k)
    return assignment


def global_correct(logits: torch.Tensor, labels: torch.Tensor, masks: dict[str, torch.Tensor]) -> torch.Tensor:
    """Collective: the correct predictions on the ``val`` and ``test`` masks, summed over all processes, as a
    float tensor ``[val, test]`` (divide by the global mask sizes for the accuracies)."""
    import torch.distributed as dist

    correct = torch.tensor([float(correct_predictions(logits[masks[m]], labels[masks[m]])) for m in ("val", "test")])
    dist.all_reduce(correct)
    return correct


def sum_gradients_and_loss(w: dict[str, torch.Tensor], loss: torch.Tensor, all_reduce) -> float:
    """Sum every process's weight gradients and loss in one ``all_reduce`` (a Comm's, or
    ``torch.distributed.all_reduce``); the gradients are written back in place.  Returns the summed loss."""
    flat = torch.cat([t.grad.flatten() for t in w.values()] + [loss.detach().view(1)])
    all_reduce(flat)
    offset = 0
    for t in w.values():
        t.grad.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()
    return float(flat[-1])


def train(dataset: str = "cora", model: str = "gcn", partitioner: str = "metis", epochs: int = 10,
          hidden: int = 16, lr: float | None = None, weight_decay: float | None = None, seed: int = 0) -> RankRun:
    """Run in each of K processes: full-graph training on this process's part plus its halo."""
    import torch.distributed as dist

    from ..comm.collectives import Comm

    lr, weight_decay = adam_settings(model, lr, weight_decay)  # None: TRAIN_DEFAULTS of the model
    rank = dist.get_rank()
    graph, x, labels, w = load_problem(dataset, model, hidden, seed)
    assignment = shared_assignment(graph, partitioner, seed)
    part = local_graph(graph, assignment, rank, model)
    masks = {name: graph.ndata[f"{name}_mask"][part.owned] for name in ("train", "val", "test")}
    totals = {name: int(graph.ndata[f"{name}_mask"].sum()) for name in masks}
    x_own, y_own = x[part.owned], labels[part.owned]
    w = {name: t.requires_grad_(True) for name, t in w.items()}
    opt = torch.optim.Adam(w.values(), lr=lr, weight_decay=weight_decay)
    comm = Comm()
    losses, halo_bytes, grad_bytes, rows = [], [], [], []
    for _ in range(epochs):
        seconds = [0.0]
        before = comm.windows.get("halo", (0, 0))[0], comm.windows.get("gradients", (0, 0))[0]
        with comm.window("halo"):
            start = time.perf_counter()
            opt.zero_grad()
            logits = forward(model, w, x_own, part, comm, seconds)
            loss = F.cross_entropy(logits[masks["train"]], y_own[masks["train"]], reduction="sum") / totals["train"]
            loss.backward()
            forward_backward = time.perf_counter() - start
        with comm.window("gradients"):
            start = time.perf_counter()
            losses.append(sum_gradients_and_loss(w, loss, comm.all_reduce))
            allreduce = time.perf_counter() - start
        start = time.perf_counter()
        opt.step()
        step = time.perf_counter() - start
        halo_bytes.append(comm.windows["halo"][0] - before[0])
        grad_bytes.append(comm.windows["gradients"][0] - before[1])
        rows.append(dict(compute_s=forward_backward - seconds[0] + step, halo_s=seconds[0], allreduce_s=allreduce))
    with torch.no_grad(), comm.window("evaluate"):
        correct = global_correct(forward(model, w, x_own, part, comm, [0.0]), y_own, masks)
    summary = comm.summary()
    return RankRun(rank=rank, losses=losses, halo_bytes_sent=halo_bytes, gradient_bytes_sent=grad_bytes,
                timeline=rows, owned=len(part.owned), halo=len(part.halo),
                halo_rows_sent=sum(part.send_counts), halo_rows_received=sum(part.recv_counts),
                val_acc=float(correct[0]) / totals["val"], test_acc=float(correct[1]) / totals["test"],
                weights={name: t.detach() for name, t in w.items()}, assignment=assignment,
                all_to_all_calls=summary["by_op"]["all_to_all"]["calls"],
                all_to_all_payload_sent=summary["by_op"]["all_to_all"]["payload_sent"],
                all_to_all_headers_sent=summary["by_op"]["all_to_all"]["headers_sent"])


def run_subgraph(dataset: str = "cora", model: str = "gcn", num_parts: int = 2, partitioner: str = "metis",
                 epochs: int = 10, hidden: int = 16, seed: int = 0, deadline_s: float = 120.0,
                 **options: Any) -> list[RankRun]:
    """:func:`train` on ``num_parts`` real processes (gloo); the per-rank results, rank order.
    Raises ValueError for ``num_parts`` outside ``1..N``, an unknown model or partitioner.

    More than 8 parameters: ``options`` go, as JSON, to every rank's :func:`train` unchanged.
    """
    from ..data import load_dataset
    from ..base.launch import run
    from .partitioners import METHODS

    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
    if partitioner not in METHODS:
        raise ValueError(f"unknown partitioner {partitioner!r}; choose one of {', '.join(METHODS)}")
    n = load_dataset(dataset).num_nodes()
    if not 1 <= num_parts <= n:
        raise ValueError(f"num_parts must lie in 1..{n} (the nodes of {dataset}), got {num_parts}")
    args = dict(dataset=dataset, model=model, partitioner=partitioner, epochs=epochs, hidden=hidden, seed=seed,
                **options)
    return run("gnnbook.ch6_fullgraph.subgraph:train", num_parts, args, deadline_s=deadline_s)


def reference(dataset: str = "cora", model: str = "gcn", epochs: int = 10, hidden: int = 16, lr: float | None = None,
              weight_decay: float | None = None, seed: int = 0) -> ReferenceRun:
    """The same training in one process on the whole graph, with DGL's ``GraphConv`` /
    ``SAGEConv`` holding the same initial weights."""
    import dgl.nn as dglnn

    lr, weight_decay = adam_settings(model, lr, weight_decay)
    graph, x, labels, w = load_problem(dataset, model, hidden, seed)
    classes = w["b2"].numel()
    if model == "gcn":
        layers = torch.nn.ModuleList([dglnn.GraphConv(x.shape[1], hidden), dglnn.GraphConv(hidden, classes)])
        for i, layer in enumerate(layers, 1):
            layer.weight.data.copy_(w[f"W{i}"])
            layer.bias.data.copy_(w[f"b{i}"])
    else:
        layers = torch.nn.ModuleList([dglnn.SAGEConv(x.shape[1], hidden, "mean"),
                                      dglnn.SAGEConv(hidden, classes, "mean")])
        for i, layer in enumerate(layers, 1):
            layer.fc_self.weight.data.copy_(w[f"S{i}"].T)
            layer.fc_neigh.weight.data.copy_(w[f"N{i}"].T)
            layer.fc_self.bias.data.copy_(w[f"b{i}"])      # DGL 2.1 keeps SAGEConv's bias in fc_self
    opt = torch.optim.Adam(layers.parameters(), lr=lr, weight_decay=weight_decay)
    train_mask = graph.ndata["train_mask"]
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        logits = layers[1](graph, torch.relu(layers[0](graph, x)))
        loss = F.cross_entropy(logits[train_mask], labels[train_mask])
        loss.backward()
        opt.step()
        losses.append(float(loss))
    with torch.no_grad():
        logits = layers[1](graph, torch.relu(layers[0](graph, x)))
    acc = {m: correct_predictions(logits[mask], labels[mask]) / int(mask.sum())       # counts, as the K processes do
           for m, mask in ((m, graph.ndata[f"{m}_mask"]) for m in ("val", "test"))}
    if model == "gcn":
        weights = {name: getattr(layers[int(name[1]) - 1], "weight" if name[0] == "W" else "bias").detach()
                   for name in w}
    else:
        attr = {"S": "fc_self", "N": "fc_neigh"}
        weights = {name: (getattr(layers[int(name[1]) - 1], attr[name[0]]).weight.detach().T if name[0] in attr
                          else layers[int(name[1]) - 1].fc_self.bias.detach()) for name in w}
    return ReferenceRun(losses=losses, weights=weights, val_acc=acc["val"], test_acc=acc["test"])
