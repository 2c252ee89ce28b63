"""Computation decomposition (P3, Gandhi & Iyer, OSDI 2021; book 5.2.4), against data parallelism.

Book: 5.2.4 data-parallel training by computation decomposition.

Used in: chapters/05c_execution_engine.ipynb.

In data-parallel minibatch training every machine computes its own minibatch
and first **pulls the F-wide feature rows** of the minibatch's input nodes
that other machines own.  P3 instead splits the features **by column**: machine
``r`` holds columns ``cols_r`` of every node and the matching rows of the first
layer's weight.  The first layer runs model-parallel: for every machine's
minibatch ``j``, machine ``r`` computes the partial product
``A1_j (X_src[:, cols_r] W1[cols_r])`` (one ``hidden``-wide row per first-layer
output node) and sends it to ``j``, which sums the partials; backward sends the
gradient of that sum back.  The remaining layers are data parallel.  P3 moves
``2 (K-1) * hidden`` floats per first-layer output node and no feature rows, so
it wins when features are wide and loses when they are narrow.

Here a two-layer mean-aggregation GNN takes one step on ``K`` real processes
both ways (:func:`step`), with every byte measured on the sockets
(:class:`gnnbook.comm.collectives.Comm`), and :func:`reference_gradients` computes the same
step in one process: both must give its gradients.

Every rank builds the same graph, features (seeded, ``feature_width`` wide), weights and
minibatches; a rank then uses only the part it would hold (its columns, or its nodes).
Sampling is replicated (each rank samples every minibatch with the same seed), which the
real P3 distributes; it moves no bytes here.

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.ch5_minibatch.p3:step", 2, {"mode": "p3", "feature_width": 32},
    ...           deadline_s=120)                                                                    # doctest: +SKIP
    >>> out[0].activation_bytes_formula > 0                                                          # doctest: +SKIP
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import dgl
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..base.records import record
from ..comm.algorithms import sum_from_peers

MODES = ("p3", "data_parallel")


@dataclass
class Problem:
    """What every rank (and the one-process reference) builds identically from the seed."""

    features: torch.Tensor          # (N, F)
    labels: torch.Tensor            # (N,)
    owner: torch.Tensor             # (N,) machine that holds a node's row (data parallel)
    minibatches: list[tuple[torch.Tensor, list]]   # per machine: (input nodes, [block1, block2])
    weights: dict[str, torch.Tensor]


def build(dataset: str = "cora", feature_width: int = 128, hidden: int = 16, fanouts: Sequence[int] = (10, 10),
          batch_size: int = 64, num_machines: int = 2, seed: int = 0) -> Problem:
    """The graph's structure and labels with seeded random features of ``feature_width`` columns,
    a random node-to-machine assignment, one minibatch per machine and the initial weights."""
    from ..data import load_dataset

    if num_machines > feature_width:
        raise ValueError(f"P3 splits {feature_width} feature columns over {num_machines} machines: "
                         f"give at least one column each (feature_width >= {num_machines})")
    graph = load_dataset(dataset)
    gen = torch.Generator().manual_seed(seed)
    n = graph.num_nodes()
    features = torch.randn(n, feature_width, generator=gen)
    labels = graph.ndata["label"].long()
    owner = torch.randperm(n, generator=gen) % num_machines
    train = torch.nonzero(graph.ndata["train_mask"]).flatten()
    train = train[torch.randperm(len(train), generator=gen)]
    if len(train) < num_machines * batch_size:
        raise ValueError(f"{dataset} has {len(train)} training nodes: too few for {num_machines} minibatches of "
                         f"{batch_size}; lower batch_size")
    sampler = dgl.dataloading.NeighborSampler(list(fanouts))
    threads = dgl.utils.get_num_threads()
    dgl.utils.set_num_threads(1)   # one random stream, seeded after: every rank draws the same neighbours
    dgl.seed(seed)
    try:
        minibatches = []
        for j in range(num_machines):
            seeds = train[j * batch_size:(j + 1) * batch_size]
            input_nodes, _, blocks = sampler.sample_blocks(graph, seeds)
            minibatches.append((input_nodes, blocks))
    finally:
        dgl.utils.set_num_threads(threads)
    num_classes = int(labels.max()) + 1
    weights = {"W1": torch.randn(feature_width, hidden, generator=gen) / feature_width ** 0.5,
               "b1": torch.zeros(hidden),
               "W2": torch.randn(hidden, num_classes, generator=gen) / hidden ** 0.5,
               "b2": torch.zeros(num_classes)}
    return Problem(features, labels, owner, minibatches, weights)


def _mean_adjacency(block) -> torch.Tensor:
    """The block's (dst x src) mean-aggregation matrix, dense (minibatch blocks are small)."""
    src, dst = block.edges()
    a = torch.zeros(block.num_dst_nodes(), block.num_src_nodes())
    a.index_put_((dst.long(), src.long()), torch.ones(len(src)), accumulate=True)
    return a / a.sum(1, keepdim=True).clamp(min=1)


def _upper_layers(z1: torch.Tensor, blocks, w: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    h1 = torch.relu(z1)
    logits = _mean_adjacency(blocks[1]) @ (h1 @ w["W2"]) + w["b2"]
    return F.cross_entropy(logits, labels[blocks[1].dstdata[dgl.NID].long()])


def reference_gradients(problem: Problem) -> dict[str, torch.Tensor]:
    """One process: the mean over machines of each minibatch's loss, and its gradients.

    Example:
        >>> sorted(reference_gradients(build(num_machines=2)))   # doctest: +SKIP
        ['W1', 'W2', 'b1', 'b2']
    """
    w = {k: v.clone().requires_grad_(True) for k, v in problem.weights.items()}
    k = len(problem.minibatches)
    loss = 0.0
    for input_nodes, blocks in problem.minibatches:
        z1 = _mean_adjacency(blocks[0]) @ (problem.features[input_nodes] @ w["W1"]) + w["b1"]
        loss = loss + _upper_layers(z1, blocks, w, problem.labels) / k
    loss.backward()
    return {name: t.grad for name, t in w.items()}


def _data_parallel(problem: Problem, comm, rank: int, k: int, w: dict[str, torch.Tensor]) -> dict[str, Any]:
    input_nodes, blocks = problem.minibatches[rank]
    owners = problem.owner[input_nodes]
    ask = [input_nodes[owners == m] for m in range(k)]          # ids this rank needs from machine m
    with comm.window("features"):
        counts_out = torch.tensor([len(a) for a in ask])
        counts_in = torch.empty_like(counts_out)
        comm.all_to_all_single(counts_in, counts_out)
        ids_in = torch.empty(int(counts_in.sum()), dtype=torch.int64)
        comm.all_to_all_single(ids_in, torch.cat(ask), counts_in.tolist(), counts_out.tolist())
        rows_out = problem.features[ids_in]                     # the rows others asked this machine for
        rows_in = torch.empty(int(counts_out.sum()), problem.features.shape[1])
        comm.all_to_all_single(rows_in, rows_out, counts_out.tolist(), counts_in.tolist())
    features = torch.empty(len(input_nodes), problem.features.shape[1])
    features[torch.cat([torch.nonzero(owners == m).flatten() for m in range(k)])] = rows_in
    z1 = _mean_adjacency(blocks[0]) @ (features @ w["W1"]) + w["b1"]
    (_upper_layers(z1, blocks, w, problem.labels) / k).backward()
    remote = int((owners != rank).sum())
    return dict(remote_rows=remote, input_nodes=len(input_nodes),
                activation_bytes_formula=0, feature_bytes_formula=remote * (4 * problem.features.shape[1] + 8))


def _p3(problem: Problem, comm, rank: int, k: int, w: dict[str, torch.Tensor]) -> dict[str, Any]:
    cols = torch.tensor_split(torch.arange(problem.features.shape[1]), k)[rank]
    my_features, my_w1 = problem.features[:, cols], w["W1"]
    partials = []                                               # this rank's share of every machine's layer 1
    for input_nodes, blocks in problem.minibatches:
        partials.append(_mean_adjacency(blocks[0]) @ (my_features[input_nodes] @ my_w1[cols]))
    hidden = partials[0].shape[1]
    _, my_blocks = problem.minibatches[rank]
    with comm.window("activations"):
        # every machine's partial of minibatch j goes to j; this rank sums the partials of its own
        received = sum_from_peers({j: partials[j] for j in range(k) if j != rank}, partials[rank], comm)
        z1 = partials[rank] + received + w["b1"]                # the owner's first-layer output
        z1.retain_grad()
        (_upper_layers(z1, my_blocks, w, problem.labels) / k).backward()
        sends = [comm.isend(z1.grad.clone(), j) for j in range(k) if j != rank]
        for j in range(k):
            if j != rank:
                grad = torch.empty(problem.minibatches[j][1][0].num_dst_nodes(), hidden)
                comm.recv(grad, j)
                partials[j].backward(grad)                      # this rank's W1 rows, for machine j's minibatch
        for request in sends:
            request.wait()
    first_layer_outputs = [blocks[0].num_dst_nodes() for _, blocks in problem.minibatches]
    return dict(cols=[int(cols[0]), int(cols[-1]) + 1], first_layer_outputs=first_layer_outputs,
                activation_bytes_formula=4 * hidden * (sum(first_layer_outputs) - first_layer_outputs[rank]
                                                       + (k - 1) * first_layer_outputs[rank]),
                feature_bytes_formula=0)


@record
@dataclass
class StepRank:
    """What one rank of :func:`step` computed and moved; the last four fields belong to one mode each."""

    mode: str  # "p3" or "data_parallel"
    rank: int
    grads: dict[str, torch.Tensor]  # all-reduced (P3: W1 holds this rank's rows only, zeros elsewhere)
    activation_bytes_formula: int  # P3's partial activations and their gradients (0 in data parallel)
    feature_bytes_formula: int  # data parallel's feature rows and ids (0 in P3)
    phase_wire: list[int]  # [sent, received] on the sockets in the mode's phase (activations / features)
    gradient_wire: list[int]  # ... in the gradient all-reduce
    summary: dict[str, Any]  # Comm.summary()
    remote_rows: int | None = None  # data parallel: input rows another machine owns
    input_nodes: int | None = None  # data parallel: its minibatch's input nodes
    cols: list[int] | None = None  # P3: [first, last + 1] of its feature columns
    first_layer_outputs: list[int] | None = None  # P3: first-layer output nodes of every machine's minibatch


def step(mode: str = "p3", dataset: str = "cora", feature_width: int = 128, hidden: int = 16,
         fanouts: Sequence[int] = (10, 10), batch_size: int = 64, seed: int = 0) -> StepRank:
    """Run in each rank: one training step, P3 or data parallel; returns a :class:`StepRank`: this rank's
    gradients (P3: its rows of W1 only, zeros elsewhere) and the bytes its sockets carried, per phase."""
    from ..comm.collectives import Comm

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    rank, k = dist.get_rank(), dist.get_world_size()
    problem = build(dataset, feature_width, hidden, fanouts, batch_size, k, seed)
    w = {name: t.clone().requires_grad_(True) for name, t in problem.weights.items()}
    comm = Comm()
    info = (_p3 if mode == "p3" else _data_parallel)(problem, comm, rank, k, w)
    # data parallel all-reduces every gradient; P3 all but W1, whose rows each machine owns
    synced = [name for name in w if mode == "data_parallel" or name != "W1"]
    with comm.window("gradients"):
        flat = torch.cat([w[name].grad.flatten() for name in synced])
        comm.all_reduce(flat)
    offset = 0
    for name in synced:
        size = w[name].numel()
        w[name].grad.copy_(flat[offset:offset + size].view_as(w[name]))
        offset += size
    summary = comm.summary()
    phase = "activations" if mode == "p3" else "features"
    return StepRank(mode=mode, rank=rank, grads={name: t.grad for name, t in w.items()}, **info,
                    phase_wire=summary["windows"].get(phase, summary["by_op"].get(phase, {})),
                    gradient_wire=summary["windows"]["gradients"], summary=summary)
