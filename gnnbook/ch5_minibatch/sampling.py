"""Graph sampling for minibatch training (book section 5.3.1): node-wise,
layer-wise, LABOR and subgraph samplers behind one registry, each producing
what :func:`gnnbook.training.minibatch.train_minibatch` trains on, minibatches
``(input_nodes, output_nodes, blocks)`` with one DGL block per layer.

Book: 5.3 graph sampling and its optimisation.

Used in: chapters/05a_minibatch_training_and_sampling.ipynb, chapters/05e_sampler_accuracy.ipynb.

- **node-wise** (``"neighbor"``, GraphSAGE; DGL's ``NeighborSampler``): every
  node of a layer draws at most ``f`` in-neighbours, so the input nodes grow
  like ``batch * prod(f)`` until they saturate at the reachable set.
- **LABOR** (``"labor"``, DGL's ``LaborSampler``): the same fanouts, but the
  nodes of a layer share their random draws, so fewer distinct nodes.
- **layer-wise**: a layer draws ``budget`` nodes for the whole layer, with
  ``P = D^-1/2 (A + I) D^-1/2``:
  ``"fastgcn"`` from one fixed distribution ``q(u) ~ ||P[:, u]||^2`` over all
  nodes, independent of the layer above, and ``"ladies"`` from the neighbours
  of the layer above ``V``, ``p(u) ~ ||P[V, u]||^2``.  A layer's nodes are the
  nodes above plus the drawn ones (each node keeps its own state, as in the
  LADIES authors' code), so a minibatch has at most ``batch + budget x layers``
  input nodes whatever the depth's fanout product.  The blocks are unweighted,
  like node-wise blocks: the models renormalise over the sampled neighbours
  instead of weighting each edge by ``1 / (budget * p(u))`` as the papers do.
- **subgraph**: every layer runs on one sampled subgraph and the loss is taken
  on its training nodes: ``"cluster-gcn"`` (seeded METIS clusters, DGL's
  ``ClusterGCNSampler``) and ``"saint"`` (GraphSAINT's random node, edge or
  walk subgraphs, DGL's ``SAINTSampler``, without its loss normalisation).

Example:
    >>> from gnnbook.data import load_dataset
    >>> g = load_dataset("cora")                                                  # doctest: +SKIP
    >>> batches = make_loader("ladies", g, torch.arange(64), num_layers=2, batch_size=64, budget=128)  # doctest: +SKIP
    >>> input_nodes, output_nodes, blocks = next(iter(batches))                   # doctest: +SKIP
    >>> len(input_nodes) <= 64 + 2 * 128                                          # doctest: +SKIP
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import dgl
import torch

from ..graph.normalisation import gcn_edge_weights
from ..training.minibatch import SerialSamplingLoader, check_fanouts

__all__ = ["SAMPLERS", "SamplerInfo", "make_sampler", "make_loader", "sampler_loader", "LayerWiseSampler",
           "SubgraphBlocks", "SeededClusterGCN", "subgraph_blocks", "check_budgets", "input_nodes_by_depth",
           "sampled_isolation", "compare_samplers"]


# --- layer-wise sampling: LADIES and FastGCN ----------------------------------

def _normalised_weights(graph: dgl.DGLGraph) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(src, dst, P[dst, src])`` for every edge, ``P = D^-1/2 (A + I) D^-1/2``
    (the self-loop counted in the degree whether or not the graph stores it)."""
    src, dst = graph.edges()
    has_loop = torch.zeros(graph.num_nodes(), dtype=torch.bool)
    has_loop[src[src == dst]] = True
    degree = graph.in_degrees().float() + (~has_loop).float()
    return src, dst, gcn_edge_weights(src, dst, degree, degree)


def check_budgets(budget: int | Sequence[int], num_layers: int, batch_size: int) -> list[int]:
    """Nodes drawn per layer, one per layer (input side first); a clear error
    for a budget below the batch size."""
    budgets = [int(budget)] * num_layers if isinstance(budget, (int, float)) else [int(b) for b in budget]
    if len(budgets) != num_layers:
        raise ValueError(f"got {len(budgets)} budgets {budgets} for a {num_layers}-layer model; "
                         f"give one per layer or a single number")
    if min(budgets) < batch_size:
        raise ValueError(f"layer-wise budget {budgets} is smaller than the batch ({batch_size} seed nodes): a layer "
                         f"would draw fewer nodes than the layer it feeds; choose budget >= {batch_size}")
    return budgets


class LayerWiseSampler(dgl.dataloading.Sampler):
    """LADIES (``layer_dependent=True``; Zou et al., NeurIPS 2019) or FastGCN
    (``False``; Chen et al., ICLR 2018): ``budgets[i]`` nodes drawn without
    replacement for layer ``i`` (input side first), with torch's generator.

    Example:
        >>> g = dgl.graph(([0, 1, 2, 3], [1, 2, 3, 0]))
        >>> _, out, blocks = LayerWiseSampler([2, 2], layer_dependent=True).sample(g, torch.tensor([0]))
        >>> out.tolist(), [b.num_dst_nodes() for b in blocks]
        ([0], [2, 1])
    """

    def __init__(self, budgets: Sequence[int], layer_dependent: bool):
        super().__init__()
        self.budgets = [int(b) for b in budgets]
        self.layer_dependent = layer_dependent
        self._graph_key, self._edges = None, None

    def _weights(self, g: dgl.DGLGraph):
        key = (id(g), g.num_nodes(), g.num_edges())
        if self._graph_key != key:  # computed once per graph
            src, dst, w = _normalised_weights(g)
            column_norm = torch.zeros(g.num_nodes()).index_add_(0, src, w * w)  # FastGCN's q, unnormalised
            self._graph_key, self._edges = key, (src, dst, w, column_norm)
        return self._edges

    def sample(self, g: dgl.DGLGraph, seed_nodes: torch.Tensor):
        src_all, dst_all, w_all, column_norm = self._weights(g)
        position = torch.full((g.num_nodes(),), -1, dtype=torch.long)  # global id -> index in this layer
        output_nodes = dst_nodes = torch.as_tensor(seed_nodes, dtype=torch.long)
        blocks = []
        for budget in reversed(self.budgets):  # from the seeds towards the input
            src, dst, eids = g.in_edges(dst_nodes, form="all")
            if self.layer_dependent:  # LADIES: p(u) ~ sum over v in the layer above of P[v, u]^2
                weight = torch.zeros(g.num_nodes()).index_add_(0, src, w_all[eids] ** 2)
            else:  # FastGCN: the same q(u) for every layer
                weight = column_norm
            candidates = weight.nonzero().squeeze(1)
            take = min(budget, len(candidates))
            drawn = candidates[torch.multinomial(weight[candidates], take, replacement=False)] if take else candidates
            position[dst_nodes] = torch.arange(len(dst_nodes))
            new = drawn[position[drawn] < 0]
            layer_nodes = torch.cat([dst_nodes, new])  # the layer above first, as DGL blocks expect
            position[new] = torch.arange(len(dst_nodes), len(layer_nodes))
            keep = position[src] >= 0  # edges from the layer's nodes into the layer above
            block = dgl.create_block((position[src[keep]], position[dst[keep]]),
                                     num_src_nodes=len(layer_nodes), num_dst_nodes=len(dst_nodes))
            block.srcdata[dgl.NID], block.dstdata[dgl.NID] = layer_nodes, dst_nodes
            block.edata[dgl.EID] = eids[keep]
            position[layer_nodes] = -1
            blocks.insert(0, block)
            dst_nodes = layer_nodes
        return dst_nodes, output_nodes, blocks


# --- subgraph sampling: Cluster-GCN and GraphSAINT -----------------------------

def subgraph_blocks(subgraph: dgl.DGLGraph, is_output: torch.Tensor, num_layers: int):
    """``(input_nodes, output_nodes, blocks)`` that run every layer on the whole
    ``subgraph`` (``ndata[dgl.NID]`` = original ids) and the last one into the
    nodes where ``is_output`` (a mask over its nodes) holds, which come first.

    Example:
        >>> sg = dgl.graph(([0, 1, 2], [1, 2, 0]))
        >>> sg.ndata[dgl.NID] = torch.tensor([7, 8, 9])
        >>> inputs, outputs, blocks = subgraph_blocks(sg, torch.tensor([False, True, False]), 2)
        >>> inputs.tolist(), outputs.tolist(), [b.num_dst_nodes() for b in blocks]
        ([8, 7, 9], [8], [3, 1])
    """
    order = torch.cat([is_output.nonzero().squeeze(1), (~is_output).nonzero().squeeze(1)])
    position = torch.empty_like(order)
    position[order] = torch.arange(len(order))
    src, dst = (position[t] for t in subgraph.edges())
    nodes, num_out = subgraph.ndata[dgl.NID][order], int(is_output.sum())
    n = len(nodes)
    whole = dgl.create_block((src, dst), num_src_nodes=n, num_dst_nodes=n)
    into_outputs = dst < num_out
    last = dgl.create_block((src[into_outputs], dst[into_outputs]), num_src_nodes=n, num_dst_nodes=num_out)
    for block in (whole, last):
        block.srcdata[dgl.NID], block.dstdata[dgl.NID] = nodes, nodes[:block.num_dst_nodes()]
    return nodes, nodes[:num_out], [whole] * (num_layers - 1) + [last]


class SubgraphBlocks(dgl.dataloading.Sampler):
    """Wraps a DGL subgraph sampler (``sample(g, indices) -> subgraph``) so that
    it yields blocks for :func:`subgraph_blocks`; the output nodes are the
    subgraph's nodes among ``seed_nodes`` (the training nodes)."""

    def __init__(self, subgraph_sampler: dgl.dataloading.Sampler, seed_nodes: torch.Tensor, num_nodes: int,
                 num_layers: int):
        super().__init__()
        self.inner, self.num_layers = subgraph_sampler, num_layers
        self.is_seed = torch.zeros(num_nodes, dtype=torch.bool)
        self.is_seed[seed_nodes] = True

    def sample(self, g: dgl.DGLGraph, indices: torch.Tensor):
        subgraph = self.inner.sample(g, indices)
        return subgraph_blocks(subgraph, self.is_seed[subgraph.ndata[dgl.NID]], self.num_layers)


class SeededClusterGCN(dgl.dataloading.ClusterGCNSampler):
    """DGL's Cluster-GCN sampler (Chiang et al., KDD 2019) on a seeded METIS
    partition (pymetis): DGL's own METIS call gives a different partition from
    call to call, and caches it in a file.  Only the partition differs; a
    minibatch is DGL's ``sample``: the subgraph induced by a few clusters.

    Example:
        >>> sampler = SeededClusterGCN(dgl.rand_graph(40, 160), num_parts=4)
        >>> int(sampler.partition_offset[-1])
        40
    """

    def __init__(self, graph: dgl.DGLGraph, num_parts: int, seed: int = 0):
        import numpy as np
        import pymetis

        if not 1 <= num_parts <= graph.num_nodes():
            raise ValueError(f"num_parts must be in 1..{graph.num_nodes()} (the graph's nodes), got {num_parts}")
        dgl.dataloading.Sampler.__init__(self)  # not DGL's __init__: it would run (and cache) its own METIS
        symmetric = dgl.to_bidirected(dgl.remove_self_loop(dgl.graph(graph.edges(), num_nodes=graph.num_nodes())))
        indptr, indices, _ = symmetric.adj_tensors("csr")
        parts = np.zeros(graph.num_nodes(), dtype=np.int64)
        if num_parts > 1:
            _, assignment = pymetis.part_graph(num_parts, xadj=indptr.numpy(), adjncy=indices.numpy(),
                                               options=pymetis.Options(seed=seed))
            parts = np.asarray(assignment, dtype=np.int64)
        self.partition_node_ids = torch.from_numpy(np.argsort(parts, kind="stable"))
        self.partition_offset = torch.from_numpy(
            np.concatenate([[0], np.cumsum(np.bincount(parts, minlength=num_parts))]))
        self.prefetch_ndata, self.prefetch_edata, self.output_device = [], [], None


# --- the registry ---------------------------------------------------------------

@dataclass(frozen=True)
class SamplerInfo:
    """One sampler of the registry: its family, its options with their defaults, what it is."""

    family: str  # "node-wise", "layer-wise" or "subgraph"
    options: dict[str, Any]
    description: str


SAMPLERS: dict[str, SamplerInfo] = {
    "neighbor": SamplerInfo("node-wise", dict(fanouts=None, replace=False, prob=None),
                            "GraphSAGE node-wise sampling: at most f in-neighbours per node and layer "
                            "(DGL NeighborSampler)"),
    "labor": SamplerInfo("node-wise", dict(fanouts=None, importance_sampling=0, layer_dependency=False, prob=None),
                         "LABOR: node-wise fanouts with random draws shared across a layer (DGL LaborSampler)"),
    "ladies": SamplerInfo("layer-wise", dict(budget=None),
                          "LADIES: a budget of nodes per layer, drawn from the neighbours of the layer above"),
    "fastgcn": SamplerInfo("layer-wise", dict(budget=None),
                           "FastGCN: a budget of nodes per layer, drawn independently of the layer above"),
    "cluster-gcn": SamplerInfo("subgraph", dict(num_parts=None, parts_per_batch=1),
                               "Cluster-GCN: a minibatch is the subgraph of a few METIS clusters "
                               "(DGL ClusterGCNSampler)"),
    "saint": SamplerInfo("subgraph", dict(mode="node", budget=None, num_subgraphs=None),
                         "GraphSAINT: a minibatch is a random node/edge/walk subgraph (DGL SAINTSampler)"),
}


def _options(name: str, given: dict[str, Any]) -> dict[str, Any]:
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
    allowed = SAMPLERS[name].options
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValueError(f"sampler {name!r} takes the options {', '.join(allowed)}; got unknown {', '.join(unknown)}")
    options = {**allowed, **given}
    missing = [key for key, value in options.items() if value is None and key != "prob"
               and not (name == "saint" and key == "num_subgraphs")]
    if missing:
        raise ValueError(f"sampler {name!r} needs {', '.join(missing)} (e.g. {_example(name)})")
    return options


def _example(name: str) -> str:
    return {"neighbor": "fanouts=[10, 10]", "labor": "fanouts=[10, 10]", "ladies": "budget=256",
            "fastgcn": "budget=256", "cluster-gcn": "num_parts=40", "saint": "budget=600"}[name]


def _check_graph(name: str, graph: dgl.DGLGraph, options: dict[str, Any]) -> None:
    if not graph.is_homogeneous:
        raise ValueError(f"sampler {name!r} works on homogeneous graphs; convert with dgl.to_homogeneous(graph)")
    prob = options.get("prob")
    if prob is not None and prob not in graph.edata:
        raise ValueError(f"sampler {name!r} draws neighbours with probability edata[{prob!r}], which the graph "
                         f"lacks (edge data: {sorted(graph.edata.keys()) or 'none'}); add it or pass prob=None")


def make_sampler(name: str, graph: dgl.DGLGraph, num_layers: int, batch_size: int,
                 seed_nodes: torch.Tensor | None = None, **options: Any) -> dgl.dataloading.Sampler:
    """The DGL sampler ``name`` of :data:`SAMPLERS` for a ``num_layers``-layer
    model, after checking its options and the graph.  Subgraph samplers need the
    ``seed_nodes`` (training nodes) whose loss they take.  Build it after
    seeding (:func:`gnnbook.training.train.set_seed`): LABOR draws its seed on creation.

    Example:
        >>> make_sampler("ladies", dgl.rand_graph(50, 200), 2, batch_size=8, budget=16).budgets
        [16, 16]
    """
    options = _options(name, options)
    _check_graph(name, graph, options)
    if name in ("neighbor", "labor"):
        fanouts = check_fanouts(options.pop("fanouts"), num_layers)
        cls = dgl.dataloading.NeighborSampler if name == "neighbor" else dgl.dataloading.LaborSampler
        return cls(fanouts, **options)
    if name in ("ladies", "fastgcn"):
        return LayerWiseSampler(check_budgets(options["budget"], num_layers, batch_size), name == "ladies")
    if seed_nodes is None:
        raise ValueError(f"subgraph sampler {name!r} needs seed_nodes (the nodes whose loss a subgraph takes)")
    if name == "cluster-gcn":
        inner = SeededClusterGCN(graph, int(options["num_parts"]))
    else:
        if options["mode"] not in ("node", "edge", "walk"):
            raise ValueError(f"GraphSAINT mode must be one of node, edge, walk; got {options['mode']!r}")
        inner = dgl.dataloading.SAINTSampler(options["mode"], options["budget"])
    return SubgraphBlocks(inner, seed_nodes, graph.num_nodes(), num_layers)


def make_loader(name: str, graph: dgl.DGLGraph, seed_nodes: torch.Tensor, num_layers: int, batch_size: int,
                shuffle: bool = True, **options: Any) -> SerialSamplingLoader:
    """One epoch of minibatches ``(input_nodes, output_nodes, blocks)`` from
    sampler ``name``, seeded and on one sampling thread like
    :func:`gnnbook.training.minibatch.neighbor_loader`.  Node- and layer-wise samplers
    batch ``seed_nodes`` by ``batch_size``; Cluster-GCN batches
    ``parts_per_batch`` clusters, all clusters an epoch; GraphSAINT draws
    ``num_subgraphs`` subgraphs an epoch (default: enough to cover the nodes
    once in expectation).

    Example:
        >>> g = dgl.rand_graph(60, 300)
        >>> batches = make_loader("fastgcn", g, torch.arange(10), 2, batch_size=5, budget=8)
        >>> [len(out) for _, out, _ in batches]
        [5, 5]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    seed_nodes = torch.as_tensor(seed_nodes, dtype=torch.long)
    sampler = make_sampler(name, graph, num_layers, batch_size, seed_nodes=seed_nodes, **options)
    indices, per_batch = seed_nodes, batch_size
    if name == "cluster-gcn":
        indices, per_batch = torch.arange(int(options["num_parts"])), int(options.get("parts_per_batch", 1))
    elif name == "saint":
        budget = options["budget"]
        nodes_each = budget if isinstance(budget, int) else math.prod(budget)
        count = options.get("num_subgraphs") or math.ceil(graph.num_nodes() / nodes_each)
        indices, per_batch = torch.arange(int(count)), 1
    return SerialSamplingLoader(dgl.dataloading.DataLoader(
        graph, indices, sampler, batch_size=per_batch, shuffle=shuffle, drop_last=False, num_workers=0))


def sampler_loader(name: str, num_layers: int, batch_size: int, **options: Any) -> Callable:
    """``loader`` argument for :func:`gnnbook.training.minibatch.train_minibatch`: builds
    :func:`make_loader` from the prepared graph and its training nodes.

    Example:
        >>> from gnnbook.training.minibatch import Batches, train_minibatch
        >>> from gnnbook.training.train import Optim
        >>> from gnnbook.data import load_dataset
        >>> r = train_minibatch(load_dataset("cora"), "gcn", Optim(epochs=2),
        ...                     Batches(batch_size=64,
        ...                             loader=sampler_loader("ladies", 2, 64, budget=256)))  # doctest: +SKIP
    """
    _options(name, options)  # fail before training starts
    return lambda graph, train_nodes: make_loader(name, graph, train_nodes, num_layers, batch_size, **options)


# --- measurements ----------------------------------------------------------------

def _per_layer(options: dict[str, Any], depth: int) -> dict[str, Any]:
    # a single fanout stands for the same fanout at every layer
    return {key: [value] * depth if key == "fanouts" and isinstance(value, int) else value
            for key, value in options.items()}


def _first_batches(graph, name, seed_nodes, num_layers, batch_size, num_batches, seed, options):
    from ..base.seeding import set_seed

    set_seed(seed)
    batches = []
    for batch in make_loader(name, graph, seed_nodes, num_layers, batch_size, **_per_layer(options, num_layers)):
        batches.append(batch)
        if len(batches) == num_batches:
            break
    return batches


def input_nodes_by_depth(graph: dgl.DGLGraph, name: str, depths: Sequence[int], batch_size: int,
                         seed_nodes: torch.Tensor, num_batches: int = 3, seed: int = 0,
                         **options: Any) -> list[dict[str, Any]]:
    """Mean input nodes per minibatch of sampler ``name`` for each depth (layers),
    beside the full ``depth``-hop neighbourhood of the same seeds, which any
    sampler's inputs stay within, and the nodes that can reach them at all
    (``reachable``, where the neighbourhood saturates; a single ``fanouts`` number means that fanout
    at every layer).

    Example:
        >>> rows = input_nodes_by_depth(dgl.rand_graph(80, 400), "neighbor", [1, 2], 4, torch.arange(80), fanouts=3)
        >>> [r["depth"] for r in rows], rows[0]["input_nodes"] <= rows[0]["full_neighbourhood"]
        ([1, 2], True)
    """
    from ..graph.neighbourhood import full_receptive_field, reachable_nodes

    rows = []
    for depth in depths:
        batches = _first_batches(graph, name, seed_nodes, depth, batch_size, num_batches, seed, options)
        full = [full_receptive_field(graph, out, depth)[-1] for _, out, _ in batches]
        reachable = [reachable_nodes(graph, out) for _, out, _ in batches]
        rows.append(dict(sampler=name, depth=depth, input_nodes=sum(len(b[0]) for b in batches) / len(batches),
                         output_nodes=sum(len(b[1]) for b in batches) / len(batches),
                         full_neighbourhood=sum(full) / len(full), reachable=sum(reachable) / len(reachable)))
    return rows


def sampled_isolation(graph: dgl.DGLGraph, name: str, batch_size: int, num_layers: int,
                      seed_nodes: torch.Tensor, num_batches: int = 3, seed: int = 0,
                      **options: Any) -> dict[str, float]:
    """How much of what a sampler draws is wasted, over all blocks of the first
    minibatches: ``disconnected_fraction``, the drawn nodes (sources beyond the
    layer above) with no edge into the layer above, and ``unreached_fraction``,
    the nodes of the layer above that receive from no node but themselves.

    Example:
        >>> g = dgl.rand_graph(100, 400)
        >>> 0 <= sampled_isolation(g, "fastgcn", 8, 2, torch.arange(100), budget=16)["disconnected_fraction"] <= 1
        True
    """
    drawn = disconnected = above = unreached = 0
    for _, _, blocks in _first_batches(graph, name, seed_nodes, num_layers, batch_size, num_batches, seed, options):
        for block in blocks:
            src, dst = block.edges()
            num_dst, num_src = block.num_dst_nodes(), block.num_src_nodes()
            feeds = torch.zeros(num_src, dtype=torch.bool)
            feeds[src] = True
            drawn += num_src - num_dst
            disconnected += int((~feeds[num_dst:]).sum())
            reached = torch.zeros(num_dst, dtype=torch.bool)
            reached[dst[src != dst]] = True  # dst nodes come first, so src == dst is the node itself
            above += num_dst
            unreached += int((~reached).sum())
    return dict(sampler=name, drawn_nodes=drawn, disconnected_fraction=disconnected / max(drawn, 1),
                unreached_fraction=unreached / max(above, 1))


def compare_samplers(graph: dgl.DGLGraph, samplers: dict[str, dict[str, Any]], seeds: Sequence[int],
                     model_name: str = "gcn", batch_size: int = 64, full_graph: bool = True,
                     progress: bool = False, **budget: Any) -> dict[str, list]:
    """Train full-graph and through every sampler (``{name: options}``) once per
    seed (a single ``fanouts`` number: that fanout at every layer), each to
    convergence by validation early stopping with the budgets of
    :data:`gnnbook.training.flows.FLOW_DEFAULTS` (override any of them by keyword).
    Returns ``{"full-graph": [TrainResult per seed], name: [...], ...}`` (without
    the full-graph runs when ``full_graph`` is False).

    Example:
        >>> from gnnbook.data import load_dataset
        >>> runs = compare_samplers(load_dataset("cora"), {"ladies": dict(budget=256)}, seeds=[0])  # doctest: +SKIP
        >>> sorted(runs)                                                                          # doctest: +SKIP
        ['full-graph', 'ladies']
    """
    from ..training.flows import FLOW_DEFAULTS
    from ..training.minibatch import Batches, model_layers, train_minibatch
    from ..training.train import Optim, train_node_classifier

    settings = {**FLOW_DEFAULTS, **budget}
    num_layers = model_layers(model_name, {})
    loaders = {name: sampler_loader(name, num_layers, batch_size, **_per_layer(options, num_layers))
               for name, options in samplers.items()}
    runs: dict[str, list] = {}
    if full_graph:
        runs["full-graph"] = [train_node_classifier(graph, model_name, Optim(s, epochs=settings["full_epochs"],
                                                                          patience=settings["full_patience"]),
                                                    progress=progress) for s in seeds]
    for name, loader in loaders.items():
        runs[name] = [train_minibatch(graph, model_name, Optim(s, lr=settings["mb_lr"], epochs=settings["mb_epochs"],
                                                               patience=settings["mb_patience"]),
                                      Batches(batch_size=batch_size, loader=loader), progress=progress) for s in seeds]
    return runs
