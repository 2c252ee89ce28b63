"""Push, pull and the push-pull hybrid of full-graph training (NeutronStar, Wang et al., SIGMOD 2022; book 5.2.2).

Book: 5.2.2 push-pull hybrid training.

Used in: chapters/05c_execution_engine.ipynb.

The nodes of a graph are split over ``K`` machines; machine ``r`` owns the rows
of its nodes and computes their embeddings at every layer of an ``L``-layer
mean-aggregation GNN (``h^l = act(mean_{u in N(v) + v} h^{l-1}_u W_l + b_l)``).
A node's layer-``l`` output needs the layer-``l-1`` embeddings of its
in-neighbours, and some of them (the *halo*) live on other machines.  A
machine can get a remote dependency ``(u, l)`` (node ``u``'s embedding after
layer ``l``) two ways:

- **push** (communicate the dependency): ``u``'s owner sends ``h^l_u`` at that
  layer, and in backward the gradient goes back;
- **pull** (cache the dependency): the machine computes ``h^l_u`` itself,
  redundantly, which needs ``u``'s own in-neighbours at layer ``l-1`` -- so
  pulling every dependency means fetching the ``L``-hop remote input features
  once and recomputing every remote intermediate embedding.

``mode="push"`` pushes every halo embedding at every layer; ``mode="pull"``
pulls everything (only raw input rows travel, once); ``mode="hybrid"`` decides
per dependency ``(u, l)`` by a cost model: a computed row costs the measured
time of one row of that layer (forward and backward, :func:`measure_row_costs`),
a pushed row costs its bytes (forward, plus the gradient back) times the link's
seconds per byte.  The choice is a minimum-weight *closure* (computing ``(u, l)``
forces all of ``u``'s remote in-neighbours at ``l-1`` to be present), solved
exactly as a minimum cut (:func:`choose`); pure push and pure pull are closures
too, so the hybrid's modelled cost is never above theirs.

:func:`epoch` runs in each rank of :func:`gnnbook.base.launch.run`: it exchanges
what every machine needs, takes training epochs (forward, layer-by-layer
backward with the halo gradients sent back, gradient all-reduce, SGD), measures
the bytes on the sockets (:class:`gnnbook.comm.collectives.Comm`) and times the epochs;
:func:`reference` computes the first epoch in one process: every mode must give
its logits and gradients.

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.ch5_minibatch.pushpull:epoch", 2, {"mode": "hybrid", "layers": 2},
    ...           deadline_s=120)                                                            # doctest: +SKIP
    >>> out[0].modelled["hybrid"] <= min(out[0].modelled["push"], out[0].modelled["pull"])   # doctest: +SKIP
    True
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..base.records import record

MODES = ("pull", "push", "hybrid")
PARTITIONS = ("metis", "random")
FLOAT_BYTES = 4


# ----- the problem every rank (and the one-process reference) builds identically -----

@dataclass
class Problem:
    # (N+1,) in-neighbours of node v (self loop included): indices[indptr[v]:indptr[v+1]]
    indptr: torch.Tensor
    indices: torch.Tensor
    features: torch.Tensor          # (N, F), seeded random
    labels: torch.Tensor            # (N,)
    train: torch.Tensor             # (N,) bool
    owner: torch.Tensor             # (N,) the machine that owns a node's rows
    weights: list[tuple[torch.Tensor, torch.Tensor]]   # per layer (W, b)

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def layers(self) -> int:
        return len(self.weights)

    def width(self, layer: int) -> int:
        """Columns of ``h^layer`` (0: the input features)."""
        return self.weights[layer][0].shape[0] if layer < self.layers else self.weights[-1][0].shape[1]


_PARTITIONS: dict[tuple, torch.Tensor] = {}


def partition(graph, num_parts: int, how: str = "metis", seed: int = 0) -> torch.Tensor:
    """Node -> part: METIS (few cut edges, :func:`dgl.metis_partition_assignment`; not deterministic
    from one process to the next, so kept per process: the runs of one :func:`gnnbook.base.launch.run_sequence`
    share it) or uniformly random."""
    import dgl

    if how not in PARTITIONS:
        raise ValueError(f"unknown partition {how!r}; choose one of {', '.join(PARTITIONS)}")
    if num_parts > graph.num_nodes():
        raise ValueError(f"cannot split {graph.num_nodes()} nodes over {num_parts} machines: num_parts > nodes")
    if num_parts == 1:
        return torch.zeros(graph.num_nodes(), dtype=torch.int64)
    if how == "random":
        return torch.randperm(graph.num_nodes(), generator=torch.Generator().manual_seed(seed)) % num_parts
    key = (graph.num_nodes(), graph.num_edges(), num_parts)
    if key not in _PARTITIONS:
        _PARTITIONS[key] = dgl.metis_partition_assignment(graph, num_parts).long()
    return _PARTITIONS[key].clone()


def build(dataset: str = "cora", feature_width: int = 32, hidden: int = 16, layers: int = 2, num_parts: int = 2,
          partition_by: str = "metis", seed: int = 0, owner: torch.Tensor | None = None) -> Problem:
    """The dataset's graph (self loops added) and labels, seeded random features of ``feature_width``
    columns, a node-to-machine assignment (``owner`` if given: METIS is not deterministic from one
    process to the next, so :func:`epoch` shares rank 0's and returns it) and seeded weights
    (``layers`` layers, ``hidden`` wide, the last one as wide as there are classes)."""
    import dgl

    from ..data import load_dataset

    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    if feature_width < 1 or hidden < 1:
        raise ValueError(f"feature_width and hidden must be >= 1, got {feature_width} and {hidden}")
    graph = dgl.add_self_loop(dgl.remove_self_loop(load_dataset(dataset)))
    owner = partition(graph, num_parts, partition_by, seed) if owner is None else torch.as_tensor(owner).long()
    indptr, indices, _ = graph.adj_tensors("csc")       # column v: the sources of v's in-edges
    gen = torch.Generator().manual_seed(seed)
    n = graph.num_nodes()
    labels = graph.ndata["label"].long()
    widths = [feature_width] + [hidden] * (layers - 1) + [int(labels.max()) + 1]
    features = torch.randn(n, feature_width, generator=gen)
    weights = [(torch.randn(a, b, generator=gen) / a ** 0.5, 0.1 * torch.randn(b, generator=gen))
               for a, b in zip(widths[:-1], widths[1:])]
    return Problem(indptr.long(), indices.long(), features, labels, graph.ndata["train_mask"].bool(), owner, weights)


def _mean_matrix(problem: Problem, out_nodes: torch.Tensor, in_nodes: torch.Tensor) -> torch.Tensor:
    """Sparse (len(out) x len(in)) mean over each output node's in-neighbours (all must be in ``in_nodes``)."""
    where = torch.full((problem.num_nodes,), -1, dtype=torch.int64)
    where[in_nodes] = torch.arange(len(in_nodes))
    starts, ends = problem.indptr[out_nodes], problem.indptr[out_nodes + 1]
    degree = ends - starts
    rows = torch.repeat_interleave(torch.arange(len(out_nodes)), degree)
    offsets = torch.arange(int(degree.sum())) - torch.repeat_interleave(torch.cumsum(degree, 0) - degree, degree)
    cols = where[problem.indices[torch.repeat_interleave(starts, degree) + offsets]]
    if (cols < 0).any():
        raise RuntimeError("a layer's input misses an in-neighbour of one of its outputs: the plan is not closed")
    values = 1.0 / degree.float()[rows]
    with warnings.catch_warnings():     # torch 2.2 calls sparse CSR "beta" on every use
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
        return torch.sparse_coo_tensor(torch.stack([rows, cols]), values,
                                       (len(out_nodes), len(in_nodes))).coalesce().to_sparse_csr()


def _layer(a: torch.Tensor, h: torch.Tensor, w: tuple[torch.Tensor, torch.Tensor], last: bool) -> torch.Tensor:
    z = (a @ h) @ w[0] + w[1]
    return z if last else torch.relu(z)


def _loss(logits: torch.Tensor, labels: torch.Tensor, train: torch.Tensor, total_train: int) -> torch.Tensor:
    return F.cross_entropy(logits[train], labels[train], reduction="sum") / total_train


def reference(problem: Problem) -> dict[str, Any]:
    """One process, the whole graph: the logits of every node and the gradients of the first epoch."""
    w = [(a.clone().requires_grad_(True), b.clone().requires_grad_(True)) for a, b in problem.weights]
    nodes = torch.arange(problem.num_nodes)
    a = _mean_matrix(problem, nodes, nodes)
    h = problem.features
    for layer in range(problem.layers):
        h = _layer(a, h, w[layer], layer == problem.layers - 1)
    _loss(h, problem.labels, problem.train, int(problem.train.sum())).backward()
    return {"logits": h.detach(), "grads": [(a.grad, b.grad) for a, b in w]}


# ----- which remote dependency each machine computes and which it receives -----

@dataclass
class Plan:
    """Rank ``rank``'s dependencies: at layer ``l`` (``h^l``, 0 = input features) it holds its own rows,
    ``computed[l]`` remote rows it computes itself and ``received[l]`` remote rows their owners push."""
    rank: int
    own: torch.Tensor
    computed: list[torch.Tensor]
    received: list[torch.Tensor]
    modelled: dict[str, float] = field(default_factory=dict)

    def rows(self, layer: int) -> torch.Tensor:
        return torch.cat([self.own, self.computed[layer], self.received[layer]])


def remote_levels(problem: Problem, rank: int) -> list[torch.Tensor]:
    """``levels[l]``: the remote nodes within ``L - l`` hops of the rank's nodes, the ones a pure pull needs
    at layer ``l`` (level ``L-1`` is the halo, the remote in-neighbours)."""
    mine = problem.owner == rank
    reach = mine.clone()
    levels = []
    for _ in range(problem.layers):
        nodes = torch.nonzero(reach).flatten()
        deg = problem.indptr[nodes + 1] - problem.indptr[nodes]
        starts = torch.repeat_interleave(problem.indptr[nodes], deg)
        offsets = torch.arange(int(deg.sum())) - torch.repeat_interleave(torch.cumsum(deg, 0) - deg, deg)
        reach = reach.clone()
        reach[problem.indices[starts + offsets]] = True
        levels.append(torch.nonzero(reach & ~mine).flatten())
    return levels[::-1]


def check_cost_model(cost_model: dict[str, Any], layers: int) -> dict[str, Any]:
    """A cost model is ``{"compute_s_per_row": [one per layer], "link_s_per_byte": float}``; raise naming what is
    wrong."""
    if not isinstance(cost_model, dict):
        raise ValueError(f"the cost model must be a dict with compute_s_per_row and link_s_per_byte, "
                         f"got {cost_model!r}")
    for key in ("compute_s_per_row", "link_s_per_byte"):
        if cost_model.get(key) is None:
            hint = ("the seconds per byte of the link, e.g. link_cost('10 GbE (TCP)')" if key == "link_s_per_byte"
                    else "the seconds per row of each layer, e.g. from measure_row_costs")
            raise ValueError(f"the cost model has no {key!r}: give {hint}")
    rows = list(cost_model["compute_s_per_row"])
    if len(rows) != layers or any(not c > 0 for c in rows):
        raise ValueError(f"compute_s_per_row needs {layers} positive costs (one per layer), got {rows}")
    if not float(cost_model["link_s_per_byte"]) > 0:
        raise ValueError(f"link_s_per_byte must be positive, got {cost_model['link_s_per_byte']}")
    return {"compute_s_per_row": [float(c) for c in rows], "link_s_per_byte": float(cost_model["link_s_per_byte"])}


def link_cost(link: str | float) -> float:
    """Seconds per byte of a named link of :data:`gnnbook.comm.collectives.LINKS` (1 / bandwidth), or the number
    given."""
    from ..comm.collectives import LINKS

    if isinstance(link, (int, float)):
        return float(link)
    if link not in LINKS:
        raise ValueError(f"unknown link {link!r}; choose one of {', '.join(LINKS)} or give seconds per byte")
    return 1.0 / LINKS[link]["bandwidth"]


def row_bytes(problem: Problem, layer: int) -> int:
    """Bytes a pushed row of ``h^layer`` costs: the row, and (above the inputs) its gradient sent back."""
    return FLOAT_BYTES * problem.width(layer) * (1 if layer == 0 else 2)


def modelled_cost(problem: Problem, plan: Plan, cost_model: dict[str, Any]) -> float:
    """Seconds the cost model gives this rank's dependencies: computed remote rows times their layer's
    per-row cost, plus pushed bytes (forward and gradients) times the link's seconds per byte."""
    cm = check_cost_model(cost_model, problem.layers)
    compute = sum(len(plan.computed[l]) * cm["compute_s_per_row"][l - 1] for l in range(1, problem.layers))
    moved = sum(len(plan.received[l]) * row_bytes(problem, l) for l in range(problem.layers))
    return compute + moved * cm["link_s_per_byte"]


def _min_closure(weights: np.ndarray, forced: np.ndarray, implications: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The set S of variables of least total weight with every ``forced`` one in S and, for each
    implication ``(a, b)``, ``a in S => b in S``: a minimum cut (source side = S)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    n = len(weights)
    # integer capacities: the largest weight ~2^20 units, and all of them together below 2^29
    scale = min(2 ** 20 / max(float(np.abs(weights).max()), 1e-30), 2 ** 29 / max(float(np.abs(weights).sum()), 1e-30))
    w = np.rint(weights * scale).astype(np.int64)
    inf = int(np.abs(w).sum()) + 1
    if 2 * inf >= 2 ** 31:
        raise RuntimeError("too many dependencies for 32-bit capacities; lower the resolution")
    source, sink = n, n + 1
    idx = np.arange(n)
    gain = (-w > 0) | forced                                         # choosing these lowers the cost (or must happen)
    rows = [np.full(int(gain.sum()), source), idx[w > 0], implications[0]]
    cols = [idx[gain], np.full(int((w > 0).sum()), sink), implications[1]]
    caps = [np.where(forced[gain], inf, -w[gain]), w[w > 0], np.full(len(implications[0]), inf)]
    graph = coo_matrix((np.concatenate(caps).astype(np.int32), (np.concatenate(rows), np.concatenate(cols))),
                       shape=(n + 2, n + 2)).tocsr()
    flow = maximum_flow(graph, source, sink).flow
    residual = (graph - flow).tocsr()
    residual.data[residual.data < 0] = 0
    residual.eliminate_zeros()
    reached = breadth_first_order(residual, source, directed=True, return_predecessors=False)
    chosen = np.zeros(n + 2, dtype=bool)
    chosen[reached] = True
    return chosen[:n]


def choose(problem: Problem, rank: int, mode: str, cost_model: dict[str, Any] | None = None) -> Plan:
    """Rank ``rank``'s plan: pull (compute every remote dependency), push (receive every halo row at every
    layer) or hybrid (the cheapest closed choice under ``cost_model``, by a minimum cut).

    Variables: ``n[u, l]`` (remote ``h^l_u`` is present) and ``c[u, l]`` (it is computed here, ``l >= 1``).
    The halo is present at every layer; ``c[u, l]`` implies ``n[u, l]`` and ``n[w, l-1]`` for every remote
    in-neighbour ``w``; cost = present rows' push bytes + computed rows' (compute - push) cost."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    L = problem.layers
    own = torch.nonzero(problem.owner == rank).flatten()
    levels = remote_levels(problem, rank)
    halo = levels[L - 1]
    empty = torch.zeros(0, dtype=torch.int64)
    if mode == "pull":
        plan = Plan(rank, own, [empty] + levels[1:], [levels[0]] + [empty] * (L - 1))
    elif mode == "push":
        plan = Plan(rank, own, [empty] * L, [halo] * L)
    else:
        if cost_model is None:
            raise ValueError("mode 'hybrid' needs a cost model (compute_s_per_row and link_s_per_byte)")
        cm = check_cost_model(cost_model, L)
        # variable numbering: n[l] for the nodes of levels[l], then c[l] (l >= 1) for the same nodes
        base_n, base_c, count = [], [], 0
        for l in range(L):
            base_n.append(count)
            count += len(levels[l])
        for l in range(L):
            base_c.append(count)
            count += len(levels[l]) if l >= 1 else 0
        weights = np.zeros(count)
        forced = np.zeros(count, dtype=bool)
        heads, tails = [], []
        position = [torch.full((problem.num_nodes,), -1, dtype=torch.int64) for _ in range(L)]
        for l in range(L):
            position[l][levels[l]] = torch.arange(len(levels[l]))
            push = row_bytes(problem, l) * cm["link_s_per_byte"]
            weights[base_n[l]:base_n[l] + len(levels[l])] = push
            forced[base_n[l] + position[l][halo].numpy()] = True
            if l >= 1:
                weights[base_c[l]:base_c[l] + len(levels[l])] = cm["compute_s_per_row"][l - 1] - push
                c = base_c[l] + np.arange(len(levels[l]))
                heads.append(c)
                tails.append(base_n[l] + np.arange(len(levels[l])))
                deg = problem.indptr[levels[l] + 1] - problem.indptr[levels[l]]
                starts = torch.repeat_interleave(problem.indptr[levels[l]], deg)
                offsets = torch.arange(int(deg.sum())) - torch.repeat_interleave(torch.cumsum(deg, 0) - deg, deg)
                nbr = problem.indices[starts + offsets]
                src = torch.repeat_interleave(torch.arange(len(levels[l])), deg)
                remote = problem.owner[nbr] != rank
                heads.append(base_c[l] + src[remote].numpy())
                tails.append(base_n[l - 1] + position[l - 1][nbr[remote]].numpy())
        chosen = _min_closure(weights, forced, (np.concatenate(heads) if heads else np.zeros(0, np.int64),
                                                np.concatenate(tails) if tails else np.zeros(0, np.int64)))
        computed, received = [empty], []
        for l in range(L):
            present = torch.from_numpy(chosen[base_n[l]:base_n[l] + len(levels[l])])
            done = (torch.from_numpy(chosen[base_c[l]:base_c[l] + len(levels[l])]) if l >= 1
                    else torch.zeros_like(present))
            if l >= 1:
                computed.append(levels[l][done])
            received.append(levels[l][present & ~done])
        plan = Plan(rank, own, computed, received)
    if cost_model is not None:
        plan.modelled = {"cost": modelled_cost(problem, plan, cost_model)}
        if mode == "hybrid":     # guard against rounding of the integer capacities
            for other in ("push", "pull"):
                alternative = choose(problem, rank, other, cost_model)
                if alternative.modelled["cost"] < plan.modelled["cost"]:
                    plan = alternative
    return plan


def formula_bytes(problem: Problem, plan: Plan) -> dict[str, int]:
    """Payload bytes this rank receives in one epoch: pushed rows forward, and the gradients it sends back."""
    forward = sum(len(plan.received[l]) * FLOAT_BYTES * problem.width(l) for l in range(problem.layers))
    backward = sum(len(plan.received[l]) * FLOAT_BYTES * problem.width(l) for l in range(1, problem.layers))
    return {"forward_received": forward, "backward_sent": backward}


def redundant_rows(plan: Plan) -> list[int]:
    """Rows computed per layer for nodes the rank does not own (layer 1 .. L-1; the last layer: none)."""
    return [len(c) for c in plan.computed[1:]] + [0]


# ----- the distributed epoch -----

def measure_row_costs(problem: Problem, rank: int, repeats: int = 3) -> list[float]:
    """Seconds per output row of each layer, forward and backward, timed on this rank's own rows
    (inputs: own rows and the halo; the median of ``repeats``)."""
    own = torch.nonzero(problem.owner == rank).flatten()
    halo = remote_levels(problem, rank)[-1]
    a = _mean_matrix(problem, own, torch.cat([own, halo]))
    costs = []
    for layer, (w, b) in enumerate(problem.weights):
        h = torch.randn(len(own) + len(halo), w.shape[0], requires_grad=True)
        wl, bl = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            _layer(a, h, (wl, bl), layer == problem.layers - 1).sum().backward()
            times.append(time.perf_counter() - start)
        costs.append(max(float(np.median(times)) / max(len(own), 1), 1e-12))
    return costs


def _exchange_plan(plan: Plan, problem: Problem, comm) -> list[list[torch.Tensor]]:
    """Tell every owner which of its rows this rank needs at each layer; return, per layer and peer,
    the owner-local positions of the rows this rank must push to that peer."""
    k, rank = comm.world_size, comm.rank
    local = torch.full((problem.num_nodes,), -1, dtype=torch.int64)
    local[plan.own] = torch.arange(len(plan.own))
    sends = []
    for l in range(problem.layers):
        ids = plan.received[l]
        ask = [ids[problem.owner[ids] == m] for m in range(k)]
        counts_out = torch.tensor([len(a) for a in ask])
        counts_in = torch.empty_like(counts_out)
        comm.all_to_all_single(counts_in, counts_out)
        ids_in = torch.empty(int(counts_in.sum()), dtype=torch.int64)
        comm.all_to_all_single(ids_in, torch.cat(ask), counts_in.tolist(), counts_out.tolist())
        sends.append([local[part] for part in ids_in.split(counts_in.tolist())])
        assert all((s >= 0).all() for s in sends[-1]) and len(sends[-1][rank]) == 0
    return sends


@dataclass
class _Layers:
    matrices: list[torch.Tensor]     # layer l+1's mean matrix: (own + computed[l+1]) x rows(l)
    recv_order: list[torch.Tensor]   # received[l] sorted by owner (the order rows arrive in)
    recv_counts: list[list[int]]


def _prepare(problem: Problem, plan: Plan, k: int) -> _Layers:
    matrices, order, counts = [], [], []
    for l in range(problem.layers):
        ids = plan.received[l]
        by_owner = ids[torch.argsort(problem.owner[ids], stable=True)]
        order.append(by_owner)
        counts.append([int((problem.owner[ids] == m).sum()) for m in range(k)])
        out_nodes = torch.cat([plan.own, plan.computed[l + 1]]) if l + 1 < problem.layers else plan.own
        matrices.append(_mean_matrix(problem, out_nodes, torch.cat([plan.own, plan.computed[l], by_owner])))
    return _Layers(matrices, order, counts)


def _push(rows: torch.Tensor, sends: list[torch.Tensor], counts: list[int], comm) -> torch.Tensor:
    """Send ``rows[sends[peer]]`` to each peer; receive ``counts[peer]`` rows from each."""
    out_rows = torch.cat([rows[s] for s in sends])
    incoming = torch.empty(sum(counts), rows.shape[1])
    comm.all_to_all_single(incoming, out_rows.contiguous(), counts, [len(s) for s in sends])
    return incoming


def _pull_back(grad: torch.Tensor, sends: list[torch.Tensor], counts: list[int], own_rows: int, comm) -> torch.Tensor:
    """Backward of :func:`_push`: send each received row's gradient to its owner; sum what comes back
    into the owner's rows."""
    incoming = torch.empty(sum(len(s) for s in sends), grad.shape[1])
    comm.all_to_all_single(incoming, grad.contiguous(), [len(s) for s in sends], counts)
    total = torch.zeros(own_rows, grad.shape[1])
    total.index_add_(0, torch.cat(sends), incoming)
    return total


def _one_epoch(problem: Problem, plan: Plan, layers: _Layers, sends, w, comm, total_train: int) -> torch.Tensor:
    L, n_own = problem.layers, len(plan.own)
    h = problem.features[plan.own]             # layer 0: own rows (nothing is computed at layer 0)
    inputs, received, outputs = [], [], []
    for l in range(L):
        if l == 0:
            got = _push(problem.features[plan.own], sends[0], layers.recv_counts[0], comm)
        else:
            got = _push(h.detach(), sends[l], layers.recv_counts[l], comm).requires_grad_(True)
        inputs.append(h)
        received.append(got)
        out = _layer(layers.matrices[l], torch.cat([h, got]), w[l], l == L - 1)
        outputs.append(out)
        h = out.detach().requires_grad_(True)
    logits = outputs[-1]
    grad = torch.autograd.grad(_loss(logits, problem.labels[plan.own], problem.train[plan.own], total_train), logits)[0]
    for l in range(L - 1, -1, -1):             # layer by layer: the halo's gradients go back to the owners
        outputs[l].backward(grad)
        if l == 0:
            break
        grad = inputs[l].grad
        back = _pull_back(received[l].grad, sends[l], layers.recv_counts[l], n_own, comm)
        grad = grad.clone()
        grad[:n_own] += back
    return logits.detach()


def _train_epoch(problem, plan, prepared, sends, w, comm, total_train: int, lr: float, measure: bool):
    """One epoch: forward, backward, gradient all-reduce, SGD; returns (logits, all-reduced gradients)."""
    if measure:
        with comm.window("dependencies"):
            out = _one_epoch(problem, plan, prepared, sends, w, comm, total_train)
        with comm.window("gradients"):
            flat = torch.cat([t.grad.flatten() for pair in w for t in pair])
            comm.all_reduce(flat)
    else:
        out = _one_epoch(problem, plan, prepared, sends, w, comm, total_train)
        flat = torch.cat([t.grad.flatten() for pair in w for t in pair])
        dist.all_reduce(flat)
    offset, grads = 0, []
    with torch.no_grad():
        for a, b in w:
            ga = flat[offset:offset + a.numel()].view_as(a)
            gb = flat[offset + a.numel():offset + a.numel() + b.numel()].view_as(b)
            offset += a.numel() + b.numel()
            grads.append((ga.clone(), gb.clone()))
            a -= lr * ga
            b -= lr * gb
            a.grad = b.grad = None
    return out, grads


@record
@dataclass
class ModeRank:
    """What one rank measured for one mode of :func:`compare` (:func:`epoch` returns one)."""

    mode: str  # "pull", "push" or "hybrid"
    rank: int
    owner: torch.Tensor  # (N,) every node's machine (rank 0's partition)
    own: torch.Tensor  # the nodes this rank owns, in the order of its logits' rows
    logits: torch.Tensor  # first epoch, its own rows
    grads: list[tuple[torch.Tensor, torch.Tensor]]  # first epoch, all-reduced, per layer (W, b)
    epoch_s: list[float]  # seconds of each epoch (the first one measured bytes too)
    link_s_per_epoch: float  # the emulated link's wire seconds per epoch (0 unless emulate_link)
    dependency_wire: list[int]  # first epoch: [sent, received] on the sockets for the dependencies
    gradient_wire: list[int]  # ... and for the gradient all-reduce
    formula: dict[str, int]  # formula_bytes: forward_received, backward_sent
    redundant_rows: list[int]  # remote rows it computed itself, per layer
    received_rows: list[int]  # remote rows pushed to it, per layer
    halo: int  # its remote in-neighbours
    modelled: dict[str, float]  # the modelled cost of every mode's plan under the same cost model
    cost_model: dict[str, Any]  # compute_s_per_row, link_s_per_byte
    summary: dict[str, Any]  # Comm.summary() of the first epoch


def compare(modes: Sequence[str] = MODES, dataset: str = "cora", feature_width: int = 32, hidden: int = 16,
            layers: int = 2, partition_by: str = "metis", epochs: int = 3, link: str | float = "10 GbE (TCP)",
            cost_model: dict[str, Any] | None = None, lr: float = 0.1, seed: int = 0, link_slowdown: float = 1.0,
            emulate_link: bool = False) -> dict[str, ModeRank]:
    """Run in each rank: plan every mode of ``modes`` under one cost model (``cost_model``, or per-row
    costs measured here and ``link``'s seconds per byte times ``link_slowdown``), tell the owners what
    each plan needs, take one measured epoch per mode (bytes on the sockets), then ``epochs - 1`` timed
    epochs of every mode **in turn** (so the machine's other load falls on all modes alike).

    ``emulate_link``: every dependency exchange into this process also takes the wire time of the cost
    model's link (:class:`gnnbook.comm.emulated_link.EmulatedLink`, bandwidth ``1 / link_s_per_byte``, a model
    of a link), so the epoch times are those of the link the plans were made for.  Its latency is left
    at 0: every mode makes the same exchanges per epoch (one per layer forward, one per layer above the
    inputs backward, empty or not), so a latency would add the same to all three.  The gradient
    all-reduce, the same in every mode, runs on loopback.

    Returns, per mode, a :class:`ModeRank`: this rank's first-epoch logits (own rows) and all-reduced
    gradients, bytes, redundant rows, epoch times, the emulated link's wire seconds per epoch, and the
    modelled cost of all three modes.

    More than 8 parameters: a rank's entry point for gnnbook.base.launch.run, whose arguments arrive in each
    process as JSON: each knob is its own argument (no settings objects across processes).
    """
    from ..comm.collectives import Comm
    from ..comm.emulated_link import EmulatedLink, LinkedComm

    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if not link_slowdown >= 1:
        raise ValueError(f"link_slowdown must be >= 1 (it lengthens the link's wire time), got {link_slowdown!r}")
    rank, k = dist.get_rank(), dist.get_world_size()
    problem = build(dataset, feature_width, hidden, layers, k, partition_by, seed)
    dist.broadcast(problem.owner, 0)                # every rank uses rank 0's partition
    if cost_model is None:
        cost_model = {"compute_s_per_row": measure_row_costs(problem, rank),
                      "link_s_per_byte": link_cost(link) * link_slowdown}
    cost_model = check_cost_model(cost_model, layers)
    plans = {m: choose(problem, rank, m, cost_model) for m in MODES}
    total_train = int(problem.train.sum())
    runs = {}
    for mode in modes:
        sends = _exchange_plan(plans[mode], problem, Comm())
        runs[mode] = dict(sends=sends, prepared=_prepare(problem, plans[mode], k), comm=Comm(),
                          w=[(a.clone().requires_grad_(True), b.clone().requires_grad_(True))
                             for a, b in problem.weights])
    quiet = Comm(measure=False)
    links = {mode: EmulatedLink(1.0 / cost_model["link_s_per_byte"], 0.0) for mode in modes}
    times = {mode: [] for mode in modes}
    first = {}
    for e in range(epochs):
        for mode in modes:
            r = runs[mode]
            comm = r["comm"] if e == 0 else quiet
            if emulate_link:
                comm = LinkedComm(comm, links[mode])
            dist.barrier()
            start = time.perf_counter()
            out = _train_epoch(problem, plans[mode], r["prepared"], r["sends"], r["w"], comm,
                               total_train, lr, measure=e == 0)
            times[mode].append(time.perf_counter() - start)
            if e == 0:
                first[mode] = out
    results = {}
    for mode in modes:
        plan, summary = plans[mode], runs[mode]["comm"].summary()
        results[mode] = ModeRank(mode=mode, rank=rank, owner=problem.owner, own=plan.own, logits=first[mode][0],
                                 grads=first[mode][1], epoch_s=times[mode],
                                 link_s_per_epoch=links[mode].modeled_s / epochs,   # 0 unless emulated: nothing posted
                                 dependency_wire=summary["windows"]["dependencies"],
                                 gradient_wire=summary["windows"]["gradients"],
                                 formula=formula_bytes(problem, plan), redundant_rows=redundant_rows(plan),
                                 received_rows=[len(x) for x in plan.received],
                                 halo=len(remote_levels(problem, rank)[-1]),
                                 modelled={m: p.modelled["cost"] for m, p in plans.items()}, cost_model=cost_model,
                                 summary=summary)
    return results


def epoch(mode: str = "hybrid", **kwargs: Any) -> ModeRank:
    """Run in each rank: :func:`compare` for one mode (same keywords); returns its :class:`ModeRank`."""
    return compare([mode], **kwargs)[mode]
