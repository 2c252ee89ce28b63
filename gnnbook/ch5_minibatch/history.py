"""Historical embeddings (GNNAutoScale, Fey et al., ICML 2021; book 5.2.3), against dropping the cut
edges (Cluster-GCN) and full-batch training.

Book: 5.2.3 historical embeddings.

Used in: chapters/05g_historical_embeddings.ipynb, labs/lab05b_historical_embeddings.ipynb.

A minibatch is a few METIS clusters ``B``.  An exact GCN layer over ``B`` needs the layer's input at
every 1-hop neighbour of ``B``, also at the out-of-batch ones (the *halo* ``H``), which would need
their own neighbours, and so on: the receptive field grows with the depth.  GNNAutoScale (GAS) keeps
one **history table** per hidden layer, ``hist[l]`` (N x hidden), and in each step

- computes layer ``l``'s output for the in-batch rows ``B`` only, from the inputs at ``B`` (just
  computed) and at ``H`` (**pulled** from ``hist[l-1]``);
- **pushes** the in-batch rows it just computed into ``hist[l]`` (detached: no gradient flows into
  a history), so that a later batch whose halo holds them reads fresh values.

So a step costs ``|B| + |H|`` rows per layer, whatever the depth, and every edge of the graph is
kept; the price is *staleness*: a pulled row was computed with older weights.  Cluster-GCN (Chiang
et al., KDD 2019) instead drops the cut edges: the batch's induced subgraph, renormalised.  VR-GCN
(Chen et al., ICML 2018) is the control-variate relative of GAS: it uses the same historical
activations but adds a sampled correction ``A_sampled (h - hist)``; it is not implemented here.

The model is the course's GCN (:func:`gnnbook.models.build_model` ``"gcn"``, its parameters and
initialisation), applied through the exact full-graph normalisation ``D^-1/2 (A + I) D^-1/2``
restricted to the batch's rows (:func:`gcn_forward`; :func:`full_forward` equals ``model(graph, x)``,
tested).  The full-batch baseline is :func:`gnnbook.training.train.train_node_classifier` itself; all three
use the same optimiser, epochs budget, early stopping on validation accuracy and full-graph
evaluation (:class:`gnnbook.training.train.BestEpoch`); :func:`compare` can give the two minibatch methods
their own learning rate, and :data:`DATASET_SETTINGS` holds what was measured per dataset.  The first layer's input is
the node features, available for every node, so it needs no history: a ``L``-layer GCN has ``L - 1`` tables.

:func:`distributed` trains on real processes (:func:`gnnbook.base.launch.run`): each rank owns a share
of the clusters and trains only those, gradients are all-reduced every step, and the history rows of
a rank's out-of-rank boundary vertices are **pulled from their owners once per epoch** (one
all-to-all of ``rows x hidden x 4 bytes x (L - 1)`` per rank), measured on the sockets by
:class:`gnnbook.comm.collectives.Comm`; between two pulls a rank's own rows stay fresh and its peers' go stale.

Example:
    >>> from gnnbook.data import load_dataset
    >>> from gnnbook.training.train import Optim
    >>> result = train(load_dataset("cora"), "gas", Optim(seed=0, epochs=5))  # doctest: +SKIP
    >>> len(result.staleness), len(result.staleness[0])                     # doctest: +SKIP
    (5, 1)
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import dgl
import torch
import torch.nn.functional as F

from ..base.memory import PeakMemory
from ..base.records import record
from ..base.seeding import set_seed
from ..graph.normalisation import gcn_edge_weights
from ..training.train import (BestEpoch, Optim, accuracy, epoch_metrics, model_input, prepare_graph,
                              train_node_classifier, training_settings)
from ..models import build_model
from .sampling import SeededClusterGCN

METHODS = ("full", "gas", "cluster_gcn")
LABELS = {"full": "full-batch", "gas": "GAS (historical embeddings)", "cluster_gcn": "Cluster-GCN (cut edges dropped)"}


# --- the graph, its clusters and the batches --------------------------------------------------------

@dataclass
class Setup:
    """What every method (and every rank) builds identically from the graph and the seed."""

    graph: dgl.DGLGraph            # self-loops added, as GCN's normalisation expects
    src: torch.Tensor              # edges of ``graph`` (messages go src -> dst)
    dst: torch.Tensor
    norm: torch.Tensor             # each edge's GCN weight: out_deg(src)^-1/2 in_deg(dst)^-1/2
    adj: torch.Tensor              # the normalised adjacency, sparse CSR (dst x src)
    clusters: list[torch.Tensor]   # METIS clusters: node ids
    num_layers: int


def check_batching(num_parts: int, clusters_per_batch: int, num_nodes: int | None = None) -> None:
    """Raise a ValueError naming the value when the clusters cannot make a batch."""
    if clusters_per_batch < 1:
        raise ValueError(f"clusters_per_batch must be >= 1, got clusters_per_batch={clusters_per_batch}")
    if num_parts < clusters_per_batch:
        raise ValueError(f"Too few clusters for the batch: num_parts={num_parts} clusters cannot make a batch of "
                         f"clusters_per_batch={clusters_per_batch}; use num_parts >= {clusters_per_batch} "
                         f"or fewer clusters per batch")
    if num_nodes is not None and num_parts > num_nodes:
        raise ValueError(f"num_parts={num_parts} exceeds the graph's {num_nodes} nodes")


def metis_clusters(graph: dgl.DGLGraph, num_parts: int, seed: int = 0) -> list[torch.Tensor]:
    """``num_parts`` METIS clusters of ``graph`` (node-id tensors).  METIS runs seeded, through the same
    partition as :class:`gnnbook.ch5_minibatch.sampling.SeededClusterGCN` (``dgl.metis_partition_assignment`` is not
    seeded), so a seed gives the same clusters every time."""
    sampler = SeededClusterGCN(graph, num_parts, seed=seed)
    ids, offset = sampler.partition_node_ids, sampler.partition_offset
    return [ids[offset[i]:offset[i + 1]].clone() for i in range(num_parts)]


def build_setup(graph: dgl.DGLGraph, num_parts: int = 40, clusters_per_batch: int = 10, num_layers: int = 2,
                seed: int = 0) -> Setup:
    check_batching(num_parts, clusters_per_batch, graph.num_nodes())
    g = prepare_graph(graph)
    src, dst = (t.long() for t in g.edges())
    norm = gcn_edge_weights(src, dst, g.out_degrees(), g.in_degrees())
    adj = _csr(dst, src, norm, (g.num_nodes(), g.num_nodes()))
    return Setup(g, src, dst, norm, adj, metis_clusters(graph, num_parts, seed), num_layers)


def _csr(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape) -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape).coalesce().to_sparse_csr()


@dataclass
class Batch:
    """One step's nodes: the in-batch rows first, then the halo (out-of-batch 1-hop neighbours)."""

    nodes: torch.Tensor     # B
    halo: torch.Tensor      # H
    adj: torch.Tensor       # |B| x |B + H|: the exact full-graph weights of the edges into B (GAS)
    inner_adj: torch.Tensor  # |B| x |B|: the induced subgraph renormalised (Cluster-GCN: cut edges dropped)

    @property
    def all_nodes(self) -> torch.Tensor:
        return torch.cat([self.nodes, self.halo])


def make_batch(setup: Setup, nodes: torch.Tensor) -> Batch:
    n = setup.graph.num_nodes()
    in_batch = torch.zeros(n, dtype=torch.bool)
    in_batch[nodes] = True
    rows = csr_rows(setup.adj, nodes)                     # the batch's rows of the full adjacency
    crow, col, values = rows.crow_indices(), rows.col_indices(), rows.values()
    halo = torch.unique(col[~in_batch[col]])
    position = torch.full((n,), -1, dtype=torch.long)
    position[nodes] = torch.arange(len(nodes))
    position[halo] = torch.arange(len(nodes), len(nodes) + len(halo))
    adj = torch.sparse_csr_tensor(crow, position[col], values, (len(nodes), len(nodes) + len(halo)))
    inner = in_batch[col]
    row_of = torch.repeat_interleave(torch.arange(len(nodes)), crow[1:] - crow[:-1])
    d, s = row_of[inner], position[col[inner]]
    deg_out, deg_in = torch.bincount(s, minlength=len(nodes)), torch.bincount(d, minlength=len(nodes))
    inner_crow = torch.cat([torch.zeros(1, dtype=crow.dtype), deg_in.cumsum(0)])
    inner_adj = torch.sparse_csr_tensor(inner_crow, s, gcn_edge_weights(s, d, deg_out, deg_in),
                                        (len(nodes), len(nodes)))
    return Batch(nodes, halo, adj, inner_adj)


def epoch_batches(setup: Setup, clusters: list[int], clusters_per_batch: int,
                  generator: torch.Generator) -> list[torch.Tensor]:
    """This epoch's batches: ``clusters`` (indices into ``setup.clusters``) shuffled, in groups of
    ``clusters_per_batch`` (the last one may be smaller)."""
    order = [clusters[i] for i in torch.randperm(len(clusters), generator=generator).tolist()]
    return [torch.cat([setup.clusters[c] for c in order[i:i + clusters_per_batch]])
            for i in range(0, len(order), clusters_per_batch)]


def csr_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``x[rows]`` for a dense or sparse-CSR ``x`` (torch 2.2 cannot index a CSR tensor's rows)."""
    if x.layout != torch.sparse_csr:
        return x[rows]
    crow, col, values = x.crow_indices(), x.col_indices(), x.values()
    starts, lengths = crow[rows], crow[rows + 1] - crow[rows]
    new_crow = torch.cat([torch.zeros(1, dtype=crow.dtype), lengths.cumsum(0)])
    take = torch.repeat_interleave(starts - new_crow[:-1], lengths) + torch.arange(int(new_crow[-1]))
    return torch.sparse_csr_tensor(new_crow, col[take], values[take], (len(rows), x.shape[1]))


# --- the history table and the GCN applied through it -----------------------------------------------

class History:
    """One table per hidden layer: ``tables[l]`` holds every node's last computed input of layer
    ``l + 1`` (the output of layer ``l`` after its activation).  :meth:`push` writes rows (detached),
    :meth:`pull` reads them; both count the rows they moved."""

    def __init__(self, num_nodes: int, hidden: int, num_tables: int):
        self.tables = [torch.zeros(num_nodes, hidden) for _ in range(num_tables)]
        self.pushed = self.pulled = 0

    def push(self, layer: int, nodes: torch.Tensor, h: torch.Tensor) -> None:
        self.tables[layer][nodes] = h.detach()
        self.pushed += len(nodes)

    def pull(self, layer: int, nodes: torch.Tensor) -> torch.Tensor:
        self.pulled += len(nodes)
        return self.tables[layer][nodes]


def gcn_conv(layer, adj: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """One GraphConv of the course's GCN with its own parameters: ``adj @ (h W) + b``."""
    if layer.weight is not None:
        h = h @ layer.weight
    out = adj @ h
    return out + layer.bias if layer.bias is not None else out


def full_forward(model, adj: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The GCN over the whole graph through ``adj``; equals ``model(graph, x)`` (same dropout order)."""
    h = model.input(x)
    for i, layer in enumerate(model.layers):
        if i > 0:
            h = model.dropout(h)
        h = gcn_conv(layer, adj, h)
        if i < len(model.layers) - 1:
            h = model.act(h)
    return h


def gcn_forward(model, batch: Batch, x: torch.Tensor, history: History | None) -> torch.Tensor:
    """The batch's logits.  With a ``history`` (GAS): every hidden layer's in-batch output is pushed,
    and the halo's inputs of the next layer are pulled.  Without (Cluster-GCN): the halo is ignored
    and the induced subgraph (renormalised) is used."""
    nodes = batch.all_nodes if history is not None else batch.nodes
    adj = batch.adj if history is not None else batch.inner_adj
    h = model.input(csr_rows(x, nodes))
    for i, layer in enumerate(model.layers):
        if i > 0:
            if history is not None:
                history.push(i - 1, batch.nodes, h)
                h = torch.cat([h, history.pull(i - 1, batch.halo)])
            h = model.dropout(h)
        h = gcn_conv(layer, adj, h)
        if i < len(model.layers) - 1:
            h = model.act(h)
    return h


@torch.no_grad()
def exact_pass(model, setup: Setup, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The full-graph logits and every hidden layer's output with the current weights, without
    dropout (evaluation mode): the hidden outputs are what the history tables would hold if no row
    were stale."""
    was_training = model.training
    model.eval()
    hidden, h = [], model.input(x)
    for i, layer in enumerate(model.layers):
        h = gcn_conv(layer, setup.adj, h)
        if i < len(model.layers) - 1:
            h = model.act(h)
            hidden.append(h)
    model.train(was_training)
    return h, hidden


def exact_embeddings(model, setup: Setup, x: torch.Tensor) -> list[torch.Tensor]:
    """Every hidden layer's output over the whole graph with the current weights, without dropout."""
    return exact_pass(model, setup, x)[1]


def refresh(history: History, model, setup: Setup, x: torch.Tensor) -> None:
    """A full refresh: every table set to the exact embeddings of the current weights."""
    for table, exact in zip(history.tables, exact_embeddings(model, setup, x)):
        table.copy_(exact)


def staleness(history: History, model, setup: Setup, x: torch.Tensor,
              nodes: torch.Tensor | None = None, exact: list[torch.Tensor] | None = None) -> list[float]:
    """Per table: ``||hist - exact|| / ||exact||`` (Frobenius, over ``nodes`` or all nodes), the
    exact embeddings being those of the model's current weights (``exact``, when already computed)."""
    out = []
    for table, exact in zip(history.tables, exact if exact is not None else exact_embeddings(model, setup, x)):
        if nodes is not None:
            table, exact = table[nodes], exact[nodes]
        out.append(float((table - exact).norm() / exact.norm().clamp(min=1e-12)))
    return out


# --- training -----------------------------------------------------------------------------------------

@dataclass
class HistoryResult:
    """What one run of one method measured."""

    method: str
    seed: int
    test_acc: float
    val_acc: float
    best_epoch: int
    epochs_run: int
    seconds_per_epoch: float            # training steps only, evaluation and staleness excluded
    steps_per_epoch: int
    staleness: list[list[float]] = field(default_factory=list, repr=False)   # per epoch, per table

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _loss(logits: torch.Tensor, nodes: torch.Tensor, labels: torch.Tensor, train_mask: torch.Tensor):
    """Mean cross-entropy over the batch's training nodes (None when it has none)."""
    mask = train_mask[nodes]
    if not bool(mask.any()):
        return None
    return F.cross_entropy(logits[mask], labels[nodes[mask]])


@dataclass(frozen=True)
class Clusters:
    """How GAS and Cluster-GCN batch an epoch: ``num_parts`` METIS clusters, ``per_batch`` of them per step,
    regrouped into new batches every epoch (seeded, as Cluster-GCN's stochastic multiple partitions do) or,
    with ``regroup=False``, grouped once with only the batches' order shuffled.

    Example:
        >>> Clusters(8, 2).num_parts, Clusters().per_batch
        (8, 10)
    """

    num_parts: int = 40
    per_batch: int = 10
    regroup: bool = True


@dataclass(frozen=True)
class Hooks:
    """What lab 5b swaps in: ``forward`` (default :func:`gcn_forward`), a batch's forward pass, and
    ``history_cls`` (default :class:`History`), the table of historical embeddings; same signatures,
    and the table keeps its tables in ``.tables``; ``on_restored``, called with the model once the best
    epoch's weights are back (a grader scores it on labels the run never saw)."""

    forward: Callable[..., torch.Tensor] | None = None
    history_cls: type | None = None
    on_restored: Callable[[torch.nn.Module], Any] | None = None


def train(graph: dgl.DGLGraph, method: str = "gas", optim: Optim | None = None, clusters: Clusters | None = None,
          setup: Setup | None = None, hooks: Hooks | None = None, track_staleness: bool = True,
          refresh_on_eval: bool = False) -> HistoryResult:
    """Train the course's 2-layer GCN with ``method``: ``"full"``
    (:func:`gnnbook.training.train.train_node_classifier`), ``"gas"`` (historical embeddings) or ``"cluster_gcn"`` (cut
    edges dropped), batched as ``clusters`` says, with ``optim`` (None values:
    :data:`gnnbook.training.train.TRAIN_DEFAULTS` of "gcn").  GAS's staleness (per table, after each epoch) is in
    ``result.staleness``.  ``hooks`` swap in lab 5b's batch forward and history table.  ``refresh_on_eval``
    runs GAS as its authors' benchmark does (PyGAS ``small_benchmark/main.py``): the history is filled
    with the exact embeddings before the first step, and every evaluation pass (one full-graph forward
    without dropout per epoch) writes its hidden layers into the tables; staleness is measured before
    that write, so it is what one epoch of steps left behind.

    Example:
        >>> from gnnbook.data import load_dataset
        >>> r = train(load_dataset("cora"), "gas", Optim(epochs=5), Clusters(40, 10))  # doctest: +SKIP
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    clusters, hooks = clusters or Clusters(), hooks or Hooks()
    num_parts, clusters_per_batch, regroup = clusters.num_parts, clusters.per_batch, clusters.regroup
    forward, history_cls = hooks.forward, hooks.history_cls
    check_batching(num_parts, clusters_per_batch, graph.num_nodes())
    optim = (optim or Optim()).resolved("gcn")
    seed = optim.seed
    if method == "full":
        r = train_node_classifier(graph, "gcn", optim, progress=False)
        return HistoryResult("full", seed, r.test_acc, r.val_acc, r.best_epoch, r.epochs_run,
                             r.seconds_per_epoch, 1)
    setup = setup or build_setup(graph, num_parts, clusters_per_batch, seed=seed)
    set_seed(seed)   # as train_node_classifier: the same initial weights as the full-batch baseline
    g = setup.graph
    feat, labels = g.ndata["feat"], g.ndata["label"]
    masks = {split: g.ndata[f"{split}_mask"] for split in ("train", "val", "test")}
    model = build_model("gcn", feat.shape[1], int(labels.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=optim.lr, weight_decay=optim.weight_decay)
    x = model_input(model, feat)
    history = (history_cls or History)(g.num_nodes(), model.layers[0].bias.shape[0], len(model.layers) - 1) \
        if method == "gas" else None
    forward = forward or gcn_forward
    generator = torch.Generator().manual_seed(seed)
    batches = [make_batch(setup, nodes) for nodes in
               epoch_batches(setup, list(range(len(setup.clusters))), clusters_per_batch, generator)]
    if history is not None and refresh_on_eval:
        refresh(history, model, setup, x)
    best, stale, seconds, epochs_run = BestEpoch(optim.patience), [], 0.0, 0
    for epoch in range(optim.epochs):
        model.train()
        start = time.perf_counter()
        if regroup and epoch:
            batches = [make_batch(setup, nodes) for nodes in
                       epoch_batches(setup, list(range(len(setup.clusters))), clusters_per_batch, generator)]
        for i in torch.randperm(len(batches), generator=generator).tolist():
            batch = batches[i]
            logits = forward(model, batch, x, history)
            loss = _loss(logits, batch.nodes, labels, masks["train"])
            if loss is None:
                continue
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        seconds += time.perf_counter() - start
        epochs_run += 1
        model.eval()
        logits, hidden = exact_pass(model, setup, x)      # evaluation and the exact embeddings, one pass
        if history is not None and track_staleness:
            stale.append(staleness(history, model, setup, x, exact=hidden))
        if history is not None and refresh_on_eval:
            for table, rows in zip(history.tables, hidden):
                table.copy_(rows)
        metrics = epoch_metrics(logits, labels, masks)
        if best.update(model, epoch, metrics["val_acc"], metrics["val_loss"]):
            break
    best.restore(model)
    if hooks.on_restored is not None:
        hooks.on_restored(model)
    with torch.no_grad():
        logits = full_forward(model, setup.adj, x)
    return HistoryResult(method, seed, accuracy(logits[masks["test"]], labels[masks["test"]]), best.val_acc,
                         best.epoch, epochs_run, seconds / max(1, epochs_run), len(batches), stale)


# Per-dataset settings of the comparison, measured here (3 seeds, 2-layer GCN, 40 METIS clusters, 10 per
# batch).  Amazon-Photo's features are raw binary bag-of-words (~259 ones per row; Cora's and CiteSeer's
# are row-normalised), so at lr 0.01 the minibatch arms' first steps on label-homogeneous clusters are
# violent: a Cluster-GCN seed stayed at 1/8 validation accuracy (dead ReLUs), a GAS seed's history was
# 21x the exact embeddings after epoch 1, and patience 30 stopped runs whose noisy validation accuracy
# (240 nodes) was still rising (full-batch peaks at epochs 110-140): GAS 84.8%, Cluster-GCN 58.7%,
# full-batch 89.3%.  At lr 0.003 for the minibatch arms (they make 4 updates an epoch; full-batch keeps
# the course's 0.01, as in gnnbook.training.flows), patience 100 and GAS's history refreshed by each evaluation
# pass (refresh_on_eval) all three reach 89-90% (full 89.3, GAS 89.8, Cluster-GCN 89.2; GAS without the
# refresh 88.8).  On Cora lr 0.003 puts GAS below Cluster-GCN (81.8 vs 82.0), so it stays at 0.01 there.
DATASET_SETTINGS: dict[str, dict[str, Any]] = {
    "cora": dict(epochs=200, patience=30, minibatch_lr=None),
    "citeseer": dict(epochs=200, patience=30, minibatch_lr=None),
    "amazon-photo": dict(epochs=200, patience=100, minibatch_lr=0.003),
}


def dataset_settings(dataset: str) -> dict[str, Any]:
    """The measured settings of :func:`compare` for ``dataset`` (epochs, patience, minibatch_lr); a graph
    not in :data:`DATASET_SETTINGS` gets Cora's, which nothing here has checked on it.

    Example:
        >>> dataset_settings("amazon-photo")["minibatch_lr"]
        0.003
    """
    return dict(DATASET_SETTINGS.get(dataset, DATASET_SETTINGS["cora"]))


def compare(graph: dgl.DGLGraph, seeds: int | list[int] = 3, methods=METHODS, minibatch_lr: float | None = None,
            optim: Optim | None = None, clusters: Clusters | None = None, **options: Any) -> list[HistoryResult]:
    """Every method over every seed (a count from 0, or a list; each replaces ``optim``'s seed); METIS
    clusters are built once per seed.  ``minibatch_lr`` (when given) is the learning rate of GAS and
    Cluster-GCN, full-batch keeping ``optim.lr`` (default: the course's); ``options`` (track_staleness,
    refresh_on_eval) are :func:`train`'s, the same for every method."""
    optim, clusters = optim or Optim(), clusters or Clusters()
    out = []
    for seed in (range(seeds) if isinstance(seeds, int) else seeds):
        setup = None
        for method in methods:
            if method != "full" and setup is None:
                setup = build_setup(graph, clusters.num_parts, clusters.per_batch, seed=seed)
            run_optim = optim.with_seed(seed)
            if method != "full" and minibatch_lr is not None:
                run_optim = replace(run_optim, lr=minibatch_lr)
            out.append(train(graph, method, run_optim, clusters, setup=setup, **options))
    return out


def step_memory(graph: dgl.DGLGraph, method: str, num_parts: int = 40, clusters_per_batch: int = 10,
                steps: int = 3, seed: int = 0, setup: Setup | None = None) -> dict[str, int]:
    """Peak memory of one training step (the largest of ``steps`` steps, each measured alone with
    :class:`gnnbook.base.memory.PeakMemory`), and the rows the step touched.  ``"full"`` is one full-batch
    step of ``model(graph, x)`` (as in :func:`gnnbook.training.train.fit_node_classifier`)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    setup = setup or build_setup(graph, num_parts, clusters_per_batch, seed=seed)
    set_seed(seed)
    g = setup.graph
    feat, labels, train_mask = g.ndata["feat"], g.ndata["label"], g.ndata["train_mask"]
    model = build_model("gcn", feat.shape[1], int(labels.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    x = model_input(model, feat)
    history = History(g.num_nodes(), model.layers[0].bias.shape[0], len(model.layers) - 1)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    peak, rows = 0, 0
    batches = [make_batch(setup, nodes) for nodes in
               epoch_batches(setup, list(range(len(setup.clusters))), clusters_per_batch, generator)[:steps]]
    for i in range(steps + 1):       # the first step warms up (Adam's state, the allocator); not counted
        batch = batches[i % len(batches)]
        with PeakMemory() as measured:
            if method == "full":
                logits, nodes = model(g, x), torch.arange(g.num_nodes())
            else:
                logits = gcn_forward(model, batch, x, history if method == "gas" else None)
                nodes = batch.nodes
            loss = _loss(logits, nodes, labels, train_mask)
            optimizer.zero_grad()
            if loss is not None:
                loss.backward()
                optimizer.step()
            del logits, loss
        if i:
            peak = max(peak, measured.peak_bytes)
            rows = max(rows, g.num_nodes() if method == "full" else
                       len(batch.nodes) + (len(batch.halo) if method == "gas" else 0))
    return dict(method=method, peak_step_bytes=peak, rows_per_layer=rows,
                history_bytes=sum(t.numel() * 4 for t in history.tables) if method == "gas" else 0)


# --- distributed: each rank owns clusters; boundary histories pulled once per epoch ------------------

def ownership(setup: Setup, world_size: int) -> list[list[int]]:
    """Cluster indices per rank: cluster ``c`` goes to rank ``c % world_size``."""
    return [list(range(r, len(setup.clusters), world_size)) for r in range(world_size)]


def boundary(setup: Setup, owned_nodes: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """``rows[r][j]``: the nodes rank ``j`` owns that are 1-hop neighbours of rank ``r``'s nodes (the
    history rows ``r`` pulls from ``j`` each epoch; empty for ``j == r``)."""
    n = setup.graph.num_nodes()
    owner = torch.empty(n, dtype=torch.long)
    for r, nodes in enumerate(owned_nodes):
        owner[nodes] = r
    rows = []
    for r in range(len(owned_nodes)):
        mine = owner[setup.dst] == r
        neighbours = torch.unique(setup.src[mine & (owner[setup.src] != r)])
        rows.append([neighbours[owner[neighbours] == j] if j != r else torch.empty(0, dtype=torch.long)
                     for j in range(len(owned_nodes))])
    return rows


def history_bytes_formula(rows: int, hidden: int, num_tables: int) -> int:
    """Bytes of pulling ``rows`` boundary rows of every table: rows x hidden x 4 bytes x tables."""
    return rows * hidden * 4 * num_tables


@record
@dataclass
class HistoryRank:
    """What one rank of :func:`distributed` measured (the weights, so the accuracies, are the same on every rank)."""

    rank: int
    world_size: int
    test_acc: float  # of the best epoch's weights, on the full graph
    val_acc: float
    best_epoch: int
    epochs_run: int
    seconds_per_epoch: float  # training steps only
    steps_per_epoch: int  # the most batches any rank has (a rank with fewer all-reduces zero gradients)
    owned_clusters: int
    owned_nodes: int
    sent_rows: int  # boundary rows its peers pull from it, per epoch
    received_rows: int  # boundary rows it pulls from its peers, per epoch
    hidden: int
    num_tables: int  # history tables (layers - 1)
    history_bytes_formula_per_epoch: int  # of sent_rows, by history_bytes_formula
    history_bytes_formula: int  # ... over all epochs run
    history_wire: list[int]  # [sent, received] on the sockets for the history pulls, all epochs
    staleness: list[dict[str, float]]  # per epoch: own, pulled (first table's relative error)
    summary: dict[str, Any]  # Comm.summary()
    weights_checksum: float  # sum of the final weights (to compare the ranks)


def distributed(dataset: str = "cora", seed: int = 0, num_parts: int = 40, clusters_per_batch: int = 10,
                epochs: int = 100, patience: int | None = None) -> HistoryRank:
    """Run in each rank (``gnnbook.base.launch.run("gnnbook.ch5_minibatch.history:distributed", 2, {...})``):
    GAS on this rank's clusters, gradients all-reduced every step, the boundary rows of every history
    table pulled from their owners once per epoch (measured).  Returns a :class:`HistoryRank`: the test
    accuracy (the same weights on every rank), this rank's measured history bytes and their formula."""
    import torch.distributed as dist

    from ..comm.collectives import Comm
    from ..data import load_dataset

    rank, k = dist.get_rank(), dist.get_world_size()
    graph = load_dataset(dataset)
    check_batching(num_parts // k, clusters_per_batch)   # every rank needs clusters for a batch
    setup = build_setup(graph, num_parts, clusters_per_batch, seed=seed)
    settings = training_settings("gcn", epochs=epochs, patience=patience)
    set_seed(seed)                                     # the same initial weights on every rank
    g = setup.graph
    feat, labels = g.ndata["feat"], g.ndata["label"]
    masks = {split: g.ndata[f"{split}_mask"] for split in ("train", "val", "test")}
    model = build_model("gcn", feat.shape[1], int(labels.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings["lr"], weight_decay=settings["weight_decay"])
    torch.manual_seed(seed * 1000 + rank)              # each rank its own dropout
    x = model_input(model, feat)
    hidden, num_tables = model.layers[0].bias.shape[0], len(model.layers) - 1
    history = History(g.num_nodes(), hidden, num_tables)
    owned = ownership(setup, k)
    owned_nodes = [torch.cat([setup.clusters[c] for c in cs]) for cs in owned]
    pulls = boundary(setup, owned_nodes)
    send_rows = [pulls[j][rank] for j in range(k)]     # what each peer pulls from this rank
    recv_rows = pulls[rank]
    steps = max(math.ceil(len(cs) / clusters_per_batch) for cs in owned)
    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    batches = [make_batch(setup, nodes) for nodes in epoch_batches(setup, owned[rank], clusters_per_batch, generator)]
    params = list(model.parameters())
    comm = Comm()
    best, seconds, epochs_run, stale = BestEpoch(settings["patience"]), 0.0, 0, []
    for epoch in range(settings["epochs"]):
        with comm.window("histories"):                 # pull the boundary rows, once per epoch
            out = torch.cat([torch.cat([t[rows] for t in history.tables], 1) for rows in send_rows])
            into = torch.empty(sum(len(r) for r in recv_rows), hidden * num_tables)
            comm.all_to_all_single(into, out, [len(r) for r in recv_rows], [len(r) for r in send_rows])
            pulled = torch.cat(recv_rows)
            for i, table in enumerate(history.tables):
                table[pulled] = into[:, i * hidden:(i + 1) * hidden]
        model.train()
        start = time.perf_counter()
        order = torch.randperm(len(batches), generator=generator).tolist()
        for s in range(steps):
            optimizer.zero_grad()
            loss = None
            if s < len(order):
                batch = batches[order[s]]
                loss = _loss(gcn_forward(model, batch, x, history), batch.nodes, labels, masks["train"])
            if loss is not None:
                loss.backward()
            grads = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
            comm.all_reduce(grads)
            offset = 0
            for p in params:
                p.grad = (grads[offset:offset + p.numel()] / k).view_as(p).clone()
                offset += p.numel()
            optimizer.step()
        seconds += time.perf_counter() - start
        epochs_run += 1
        model.eval()
        logits, exact = exact_pass(model, setup, x)
        stale.append(dict(own=staleness(history, model, setup, x, owned_nodes[rank], exact)[0],
                          pulled=staleness(history, model, setup, x, torch.cat(recv_rows), exact)[0]))
        metrics = epoch_metrics(logits, labels, masks)
        if best.update(model, epoch, metrics["val_acc"], metrics["val_loss"]):
            break
    summary = comm.summary()
    best.restore(model)
    with torch.no_grad():
        logits = full_forward(model, setup.adj, x)
    sent_rows, received_rows = sum(len(r) for r in send_rows), sum(len(r) for r in recv_rows)
    return HistoryRank(rank=rank, world_size=k, test_acc=accuracy(logits[masks["test"]], labels[masks["test"]]),
                       val_acc=best.val_acc, best_epoch=best.epoch, epochs_run=epochs_run,
                       seconds_per_epoch=seconds / max(1, epochs_run), steps_per_epoch=steps,
                       owned_clusters=len(owned[rank]), owned_nodes=len(owned_nodes[rank]),
                       sent_rows=sent_rows, received_rows=received_rows, hidden=hidden, num_tables=num_tables,
                       history_bytes_formula_per_epoch=history_bytes_formula(sent_rows, hidden, num_tables),
                       history_bytes_formula=epochs_run * history_bytes_formula(sent_rows, hidden, num_tables),
                       history_wire=summary["windows"]["histories"], staleness=stale, summary=summary,
                       weights_checksum=float(sum(p.double().sum() for p in model.parameters())))
