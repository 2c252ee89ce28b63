"""Operator-parallel full-graph training: the distributed sparse-dense product of CAGNET (book 6.1.2).

Book: 6.1.2 operator parallelism; 6.1.3 subgraph vs operator parallelism.

Used in: chapters/06b_operator_parallelism.ipynb.

Tripathy, Yelick and Buluç (CAGNET, SC 2020) do not split the *graph* into
subgraphs with halos (:mod:`gnnbook.ch6_fullgraph.subgraph`); they split the
*operator*: every GCN layer is ``A_hat (H W)``, and the sparse-dense product
``Z = A H`` (SpMM) is distributed like a dense matrix product.  Nodes are in
some order (:func:`order_nodes`: the dataset's, or grouped by a partitioner's
parts) and cut into contiguous blocks.  This module implements two of the
paper's algorithms, forward and backward (the backward product is ``A^T G``,
run by the same algorithm on the blocks of ``A^T``):

- **1D** (CAGNET's 1D block-row algorithm, the variant that broadcasts
  dense blocks, not a sparsity-aware one that sends only the rows needed):
  process ``i`` of ``P`` owns row block ``i`` of ``A`` and of ``H``.  For ``j = 0..P-1`` process ``j`` **broadcasts**
  its block ``H_j`` and every process adds ``A_ij H_j``.  Every process receives every other
  block, whatever the sparsity: ``(n - n_i) f`` floats per product, textbook
  ``(P-1)/P n f`` for even blocks; summed over processes ``(P-1) n f``.
- **2D** (CAGNET's 2D algorithm, SUMMA): ``P = q x q`` processes on a grid;
  process ``(r, c)`` owns ``A_rc`` (node block r x node block c) and ``H_rc``
  (node block r x feature block c).  For ``k = 0..q-1`` process ``(r, k)``
  broadcasts ``A_rk`` along grid row ``r``, process ``(k, c)`` broadcasts
  ``H_kc`` along grid column ``c`` (sub-communicators from
  ``torch.distributed.new_group``), and ``(r, c)`` adds ``A_rk H_kc``.  Summed
  over processes a product moves ``(q-1) n f`` floats of ``H`` and ``(q-1) nnz``
  entries of ``A`` (12 bytes each here: int32 row, int32 column, float32 value;
  CAGNET broadcasts ``A`` in every product, as here; the block sizes, which a
  receiver needs, are known in advance: every process loaded the graph).  So
  2D moves fewer bytes than 1D exactly when ``12 nnz < 4 q n f``: when ``f > 3 nnz / (q n)``
  (:func:`crossover_width`).

Byte formulas (payload, float32): :func:`bytes_1d` and :func:`bytes_2d` give what every
process receives and sends under gloo's broadcast, a **binomial tree**
(:mod:`gnnbook.comm.gloo_bytes`): every non-root receives the tensor exactly once, so what a
process *receives* is the textbook volume, while the root sends at most ``ceil(log2 P)``
copies and inner tree nodes forward it (what a process *sends* is the tree's, not
``(P-1)/P``).  gloo adds 48-byte headers, three per message.

A GCN trains on top (:func:`train`): in 1D the rest of a layer is local; in 2D a layer's
output block ``(r, c)`` holds only feature columns ``c``, so before the next ``H W`` (and the
loss) the grid row all-gathers its column blocks (:class:`GatherColumns`; its backward
all-reduces the gradient along the row).  Weights are replicated, their gradients all-reduced.

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.ch6_fullgraph.spmm:product", 4, {"mode": "2d"}, deadline_s=120)   # doctest: +SKIP
    >>> all(o.payload_received == o.formula_received for o in out)                       # doctest: +SKIP
    True
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..base.records import record
from ..graph.normalisation import gcn_edge_weights
from ..training.train import adam_settings
from .subgraph import global_correct, load_problem, sum_gradients_and_loss

MODES = ("1d", "2d")
NNZ_BYTES = 12      # one A entry on the wire: int32 row, int32 column, float32 value


def grid_side(world_size: int) -> int:
    """``q`` with ``q * q == world_size``; a ValueError when there is none.

    Example:
        >>> grid_side(4)
        2
    """
    q = math.isqrt(world_size)
    if world_size < 1 or q * q != world_size:
        raise ValueError(f"2D SpMM needs a square number of processes (a q x q grid); got {world_size}")
    return q


def split_sizes(n: int, parts: int) -> list[int]:
    """``n`` items in ``parts`` contiguous blocks, the first ``n % parts`` one larger.

    Example:
        >>> split_sizes(10, 4)
        [3, 3, 2, 2]
    """
    return [n // parts + (i < n % parts) for i in range(parts)]


def order_nodes(graph, blocks: int, ordering: str = "natural", seed: int = 0) -> tuple[torch.Tensor, list[int]]:
    """A node order and its block sizes: ``"natural"`` keeps the dataset's order in equal
    blocks; a partitioner's name (:data:`gnnbook.ch6_fullgraph.partitioners.METHODS`) lists its parts one after
    another, part ``b`` being block ``b``.  Returns ``(order, sizes)``: ``order[new] = old id``."""
    from .partitioners import METHODS, partition

    n = graph.num_nodes()
    if ordering == "natural":
        return torch.arange(n), split_sizes(n, blocks)
    if ordering not in METHODS:
        raise ValueError(f"unknown ordering {ordering!r}; choose natural or one of {', '.join(METHODS)}")
    assignment = partition(graph, blocks, ordering, seed)
    return torch.argsort(assignment * n + torch.arange(n)), torch.bincount(assignment, minlength=blocks).tolist()


def normalised_adjacency(graph, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GCN's ``A_hat`` (row = destination) in ``order``: COO ``(2, nnz)`` indices and values."""
    src, dst = graph.edges()
    value = gcn_edge_weights(src, dst, graph.out_degrees(), graph.in_degrees())
    position = torch.empty_like(order)
    position[order] = torch.arange(len(order))
    return torch.stack([position[dst], position[src]]), value


def block(indices: torch.Tensor, values: torch.Tensor, offsets: list[int], r: int, c: int) -> torch.Tensor:
    """Block ``(r, c)`` of a COO matrix cut at ``offsets`` (row and column blocks alike), local indices."""
    rows, cols = indices
    keep = (rows >= offsets[r]) & (rows < offsets[r + 1]) & (cols >= offsets[c]) & (cols < offsets[c + 1])
    local = torch.stack([rows[keep] - offsets[r], cols[keep] - offsets[c]])
    shape = (offsets[r + 1] - offsets[r], offsets[c + 1] - offsets[c])
    return torch.sparse_coo_tensor(local, values[keep], shape).coalesce()


def pack(a: torch.Tensor) -> torch.Tensor:
    """A sparse block as one int32 tensor ``(3, nnz)``: rows, columns, the float32 values' bits."""
    idx = a.indices().to(torch.int32)
    return torch.cat([idx, a.values().float().view(torch.int32).view(1, -1)]).contiguous()


def unpack(packed: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    return torch.sparse_coo_tensor(packed[:2].long(), packed[2].view(torch.float32), shape, is_coalesced=True)


# ----- the two algorithms -----

@dataclass
class Plan:
    """What one process holds for one product (``A`` or ``A^T``) and how to talk."""

    mode: str
    sizes: list[int]                  # node block sizes (P blocks in 1D, q in 2D)
    blocks: list[torch.Tensor]        # 1D: A_ij for every j;  2D: [A_rc] alone
    nnz: list[list[int]] | None       # 2D: nnz of every block (known to all: sizes of the broadcasts)
    comm: Any                         # 1D: the world's Comm
    row_comm: Any = None              # 2D: this grid row's Comm, this grid column's Comm
    col_comm: Any = None
    q: int = 1


def spmm_1d(plan: Plan, h: torch.Tensor, seconds: list) -> torch.Tensor:
    """CAGNET 1D: every process broadcasts its row block of ``h``; each adds ``A_ij H_j``."""
    me = plan.comm.rank
    out = h.new_zeros(plan.sizes[me], h.shape[1])
    for j, rows in enumerate(plan.sizes):
        hj = h.contiguous() if j == me else h.new_empty(rows, h.shape[1])
        start = time.perf_counter()
        if rows and h.shape[1]:
            plan.comm.broadcast(hj, src=j)
        seconds[0] += time.perf_counter() - start
        out += torch.sparse.mm(plan.blocks[j], hj)
    return out


def spmm_2d(plan: Plan, h: torch.Tensor, seconds: list) -> torch.Tensor:
    """CAGNET 2D (SUMMA): ``A_rk`` along grid row r, ``H_kc`` along grid column c, add ``A_rk H_kc``."""
    q, rank = plan.q, dist.get_rank()
    r, c = divmod(rank, q)
    out = h.new_zeros(plan.sizes[r], h.shape[1])
    own = pack(plan.blocks[0])
    for k in range(q):
        start = time.perf_counter()
        packed = own if k == c else torch.empty(3, plan.nnz[r][k], dtype=torch.int32)
        if plan.nnz[r][k]:
            plan.row_comm.broadcast(packed, src=r * q + k)
        hk = h.contiguous() if k == r else h.new_empty(plan.sizes[k], h.shape[1])
        if plan.sizes[k] and h.shape[1]:
            plan.col_comm.broadcast(hk, src=k * q + c)
        seconds[0] += time.perf_counter() - start
        out += torch.sparse.mm(unpack(packed, (plan.sizes[r], plan.sizes[k])), hk)
    return out


class SpMM(torch.autograd.Function):
    """``A H`` on this process's blocks; backward ``A^T G`` by the same algorithm."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, plan: Plan, plan_t: Plan, seconds: list) -> torch.Tensor:
        ctx.plan_t, ctx.seconds = plan_t, seconds
        return (spmm_1d if plan.mode == "1d" else spmm_2d)(plan, h, seconds)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        p = ctx.plan_t
        return (spmm_1d if p.mode == "1d" else spmm_2d)(p, grad, ctx.seconds), None, None, None


class GatherColumns(torch.autograd.Function):
    """2D: the grid row's column blocks side by side (an all-gather, blocks padded to the widest);
    backward: the gradient summed over the row (an all-reduce), this block's columns."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, row_comm, widths: list[int], seconds: list) -> torch.Tensor:
        c, w = row_comm.rank, max(widths)
        ctx.row_comm, ctx.cols, ctx.seconds = row_comm, (sum(widths[:c]), sum(widths[:c + 1])), seconds
        shard = F.pad(x, (0, w - x.shape[1])).contiguous()
        out = x.new_empty(len(widths) * x.shape[0], w)
        start = time.perf_counter()
        row_comm.all_gather_into_tensor(out, shard)
        seconds[0] += time.perf_counter() - start
        parts = out.view(len(widths), x.shape[0], w)
        return torch.cat([parts[k, :, :wk] for k, wk in enumerate(widths)], dim=1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()
        start = time.perf_counter()
        ctx.row_comm.all_reduce(grad)
        ctx.seconds[0] += time.perf_counter() - start
        return grad[:, ctx.cols[0]:ctx.cols[1]], None, None, None


# ----- set-up in each process -----

def _shared_order(graph, blocks: int, ordering: str, seed: int) -> tuple[torch.Tensor, list[int]]:
    """Rank 0 orders the nodes, every rank receives the order (before any Comm: not counted)."""
    order, sizes = order_nodes(graph, blocks, ordering, seed) if dist.get_rank() == 0 else (
        torch.empty(graph.num_nodes(), dtype=torch.int64), [0] * blocks)
    sizes_t = torch.tensor(sizes)
    dist.broadcast(order, 0)
    dist.broadcast(sizes_t, 0)
    return order, sizes_t.tolist()


def plans(graph, mode: str, ordering: str = "natural", seed: int = 0):
    """This process's plans for ``A`` and ``A^T``, the node order and its block offsets, and its
    Comms: ``(plan, plan_t, order, offsets, comms)``.  Collective (creates the 2D sub-groups)."""
    from ..comm.collectives import Comm

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    world, rank = dist.get_world_size(), dist.get_rank()
    q = grid_side(world) if mode == "2d" else 1
    order, sizes = _shared_order(graph, world if mode == "1d" else q, ordering, seed)
    offsets = [0] + torch.cumsum(torch.tensor(sizes), 0).tolist()
    idx, val = normalised_adjacency(graph, order)
    idx_t = idx.flip(0)
    comms = {}
    if mode == "1d":
        comms["world"] = Comm()
        make = [Plan("1d", sizes, [block(i, v, offsets, rank, j) for j in range(world)], None, comms["world"])
                for i, v in ((idx, val), (idx_t, val))]
        return make[0], make[1], order, offsets, comms
    r, c = divmod(rank, q)
    rows = [dist.new_group([a * q + b for b in range(q)]) for a in range(q)]     # every rank creates every group
    cols = [dist.new_group([a * q + b for a in range(q)]) for b in range(q)]
    comms["world"] = Comm()
    comms["row"], comms["col"] = Comm(rows[r], measure=False), Comm(cols[c], measure=False)
    made = []
    for i, v in ((idx, val), (idx_t, val)):
        nnz = [[int(((i[0] >= offsets[a]) & (i[0] < offsets[a + 1]) & (i[1] >= offsets[b])
                     & (i[1] < offsets[b + 1])).sum()) for b in range(q)] for a in range(q)]
        made.append(Plan("2d", sizes, [block(i, v, offsets, r, c)], nnz, comms["world"], comms["row"], comms["col"], q))
    return made[0], made[1], order, offsets, comms


def column_blocks(width: int, q: int) -> list[int]:
    return split_sizes(width, q)


def _local_rows(mode: str, t: torch.Tensor, offsets: list[int], q: int) -> torch.Tensor:
    r = dist.get_rank() if mode == "1d" else dist.get_rank() // q
    return t[offsets[r]:offsets[r + 1]]


def _local_cols(mode: str, t: torch.Tensor, q: int) -> torch.Tensor:
    if mode == "1d":
        return t
    c, widths = dist.get_rank() % q, column_blocks(t.shape[1], q)
    return t[:, sum(widths[:c]):sum(widths[:c + 1])]


def _expected(comms: dict) -> tuple[int, int, int]:
    """Payload sent, payload received, wire sent: gloo_bytes' model summed over this rank's Comms."""
    e = [c.expected for c in comms.values()]
    return sum(v.sent for v in e), sum(v.received for v in e), sum(v.wire_sent for v in e)


# ----- one product, for the byte formulas -----

@record
@dataclass
class ProductRank:
    """One process's part of :func:`product`: its output blocks, where they sit, and its bytes."""

    rank: int
    rows: torch.Tensor  # the whole matrix's rows this process holds (node ids, dataset order)
    cols: tuple[int, int]  # the column range it holds (2D splits the columns too)
    out: torch.Tensor  # its block of A_hat H
    grad: torch.Tensor  # its block of A_hat^T G
    wire_sent: int  # measured on its sockets during the forward product
    wire_received: int
    payload_sent: int  # gloo_bytes' model of the calls made
    payload_received: int
    expected_wire_sent: int
    formula_sent: int  # the 1D / 2D formula (bytes_1d, bytes_2d)
    formula_received: int


def product(dataset: str = "cora", mode: str = "1d", width: int = 16, ordering: str = "natural",
            seed: int = 0) -> ProductRank:
    """Run in each process: ``Z = A_hat H`` for a seeded ``H`` (``n x width``) and the gradient
    ``A_hat^T G`` of ``sum(Z * G)`` for a seeded ``G``; this process's output blocks, where they
    sit in the whole matrix, and the bytes its sockets carried for the forward product alone."""
    graph, _, _, _ = load_problem(dataset, "gcn", 16, seed)
    plan, plan_t, order, offsets, comms = plans(graph, mode, ordering, seed)
    gen = torch.Generator().manual_seed(seed + 7)
    h_all = torch.randn(graph.num_nodes(), width, generator=gen)[order]
    g_all = torch.randn(graph.num_nodes(), width, generator=gen)[order]
    h = _local_cols(mode, _local_rows(mode, h_all, offsets, plan.q), plan.q).clone().requires_grad_(True)
    g = _local_cols(mode, _local_rows(mode, g_all, offsets, plan.q), plan.q)
    world = comms["world"]
    before = _expected(comms)
    with world.window("forward"):
        z = SpMM.apply(h, plan, plan_t, [0.0])
    after = _expected(comms)
    (z * g).sum().backward()
    r = dist.get_rank() if mode == "1d" else dist.get_rank() // plan.q
    c = 0 if mode == "1d" else dist.get_rank() % plan.q
    widths = [width] if mode == "1d" else column_blocks(width, plan.q)
    formula = (bytes_1d if mode == "1d" else bytes_2d)(plan.sizes, width, plan.nnz, dist.get_rank())
    return ProductRank(rank=dist.get_rank(), rows=order[offsets[r]:offsets[r + 1]],
                       cols=(sum(widths[:c]), sum(widths[:c + 1])), out=z.detach(), grad=h.grad,
                       wire_sent=world.windows["forward"][0], wire_received=world.windows["forward"][1],
                       payload_sent=after[0] - before[0], payload_received=after[1] - before[1],
                       expected_wire_sent=after[2] - before[2], formula_sent=formula[0], formula_received=formula[1])


def product_reference(dataset: str = "cora", width: int = 16, seed: int = 0) -> dict[str, torch.Tensor]:
    """:func:`product` in one process on the whole matrix (dataset order)."""
    graph, _, _, _ = load_problem(dataset, "gcn", 16, seed)
    idx, val = normalised_adjacency(graph, torch.arange(graph.num_nodes()))
    a = torch.sparse_coo_tensor(idx, val, (graph.num_nodes(),) * 2).coalesce()
    gen = torch.Generator().manual_seed(seed + 7)
    h = torch.randn(graph.num_nodes(), width, generator=gen)
    g = torch.randn(graph.num_nodes(), width, generator=gen)
    return dict(out=torch.sparse.mm(a, h), grad=torch.sparse.mm(a.t(), g))


# ----- the formulas -----

def bytes_1d(sizes: list[int], width: int, nnz: Any = None, rank: int = 0) -> tuple[int, int]:
    """Payload (sent, received) of one 1D product at ``rank``: it receives every other row block
    once, ``(n - n_rank) * width * 4`` bytes; it sends what gloo's binomial tree gives it to send.

    Example:
        >>> bytes_1d([3, 3, 2, 2], width=4, rank=0)      # receives 7 rows; sends its 3 rows to 2 ranks, forwards 2
        (128, 112)
    """
    from ..comm import gloo_bytes

    p = len(sizes)
    sent = sum(gloo_bytes.broadcast(s * width * 4, p, rank, j).sent for j, s in enumerate(sizes))
    return sent, (sum(sizes) - sizes[rank]) * width * 4


def bytes_2d(sizes: list[int], width: int, nnz: list[list[int]], rank: int = 0) -> tuple[int, int]:
    """Payload (sent, received) of one 2D product at ``rank = r q + c``: ``A_rk`` for every
    ``k != c`` (12 bytes per entry) and ``H_kc`` for every ``k != r``; sent: gloo's tree.

    Example:
        >>> bytes_2d([3, 2], width=4, nnz=[[5, 1], [1, 4]], rank=0)   # A_01: 1 entry, H_10: 2 x 2 floats
        (84, 28)
    """
    from ..comm import gloo_bytes

    q = len(sizes)
    r, c = divmod(rank, q)
    widths = column_blocks(width, q)
    recv = sum(NNZ_BYTES * nnz[r][k] for k in range(q) if k != c)
    recv += sum(sizes[k] * widths[c] * 4 for k in range(q) if k != r)
    sent = sum(gloo_bytes.broadcast(NNZ_BYTES * nnz[r][k], q, c, k).sent for k in range(q))      # along row r
    sent += sum(gloo_bytes.broadcast(sizes[k] * widths[c] * 4, q, r, k).sent for k in range(q))  # along column c
    return sent, recv


def textbook_bytes(n: int, nnz: int, width: int, processes: int) -> dict[str, float]:
    """CAGNET's volumes per product, summed over processes: 1D ``(P-1) n f`` floats;
    2D ``(q-1) n f`` floats plus ``(q-1) nnz`` entries of ``A``.  Per process: divide by ``P``.

    Example:
        >>> textbook_bytes(100, 500, 8, 4)
        {'1d': 9600.0, '2d': 9200.0}
    """
    q = math.isqrt(processes)
    return {"1d": float((processes - 1) * n * width * 4),
            "2d": float((q - 1) * (n * width * 4 + NNZ_BYTES * nnz)) if q * q == processes else float("nan")}


def crossover_width(n: int, nnz: int, q: int) -> float:
    """The width above which 2D (q x q) moves fewer bytes than 1D (q*q): ``12 nnz < 4 q n f``.

    Example:
        >>> crossover_width(100, 600, 2)
        9.0
    """
    return NNZ_BYTES * nnz / (4 * q * n)


# ----- training -----

@record
@dataclass
class OperatorRank:
    """What one of :func:`train`'s processes measured (:func:`run_operator` lists them in rank order)."""

    rank: int
    mode: str  # "1d" or "2d"
    ordering: str
    losses: list[float]  # the global training loss, per epoch
    epoch_wire_sent: list[int]  # bytes on this process's sockets, per epoch
    # per epoch, gloo's model of the calls made: payload_sent, payload_received, wire_sent
    epoch_model: list[dict[str, int]]
    timeline: list[dict[str, float]]  # per epoch: compute_s, comm_s, allreduce_s
    sizes: list[int]  # rows of each block of the matrix
    val_acc: float
    test_acc: float
    weights: dict[str, torch.Tensor]


def train(dataset: str = "cora", mode: str = "1d", ordering: str = "natural", epochs: int = 10, hidden: int = 16,
          lr: float | None = None, weight_decay: float | None = None, seed: int = 0) -> OperatorRank:
    """Run in each process: a two-layer GCN (no dropout) trained operator-parallel, ``mode``
    ``"1d"`` or ``"2d"``, from the same initial weights as :func:`subgraph.reference`."""
    lr, weight_decay = adam_settings("gcn", lr, weight_decay)
    graph, x, labels, w = load_problem(dataset, "gcn", hidden, seed)
    plan, plan_t, order, offsets, comms = plans(graph, mode, ordering, seed)
    q, world = plan.q, comms["world"]
    rows = _local_rows(mode, torch.arange(graph.num_nodes()), offsets, q)
    mine = order[rows]
    x_own, y_own = x[mine], labels[mine]
    masks = {m: graph.ndata[f"{m}_mask"][mine] for m in ("train", "val", "test")}
    totals = {m: int(graph.ndata[f"{m}_mask"].sum()) for m in masks}
    classes = w["b2"].numel()
    w = {name: t.requires_grad_(True) for name, t in w.items()}
    opt = torch.optim.Adam(w.values(), lr=lr, weight_decay=weight_decay)

    def forward(seconds: list) -> torch.Tensor:
        if mode == "1d":
            h = torch.relu(SpMM.apply(x_own @ w["W1"], plan, plan_t, seconds) + w["b1"])
            return SpMM.apply(h @ w["W2"], plan, plan_t, seconds) + w["b2"]
        # 2D: this process computes feature columns c of its node block; the row gathers them
        h = torch.relu(SpMM.apply(_local_cols(mode, x_own @ w["W1"], q), plan, plan_t, seconds)
                       + _local_cols(mode, w["b1"].view(1, -1), q))
        h = GatherColumns.apply(h, comms["row"], column_blocks(hidden, q), seconds)
        z = (SpMM.apply(_local_cols(mode, h @ w["W2"], q), plan, plan_t, seconds)
             + _local_cols(mode, w["b2"].view(1, -1), q))
        return GatherColumns.apply(z, comms["row"], column_blocks(classes, q), seconds)

    losses, wire, model, timeline = [], [], [], []
    for _ in range(epochs):
        seconds = [0.0]
        before = world.windows.get("epoch", (0, 0))[0], _expected(comms)
        with world.window("epoch"):
            start = time.perf_counter()
            opt.zero_grad()
            logits = forward(seconds)
            # every process of a grid row holds the same rows: each counts 1/q of their loss
            loss = F.cross_entropy(logits[masks["train"]], y_own[masks["train"]], reduction="sum") / totals["train"] / q
            loss.backward()
            forward_backward = time.perf_counter() - start
        start = time.perf_counter()
        losses.append(sum_gradients_and_loss(w, loss, dist.all_reduce))
        allreduce = time.perf_counter() - start
        start = time.perf_counter()
        opt.step()
        wire.append(world.windows["epoch"][0] - before[0])
        after = _expected(comms)
        model.append(dict(payload_sent=after[0] - before[1][0], payload_received=after[1] - before[1][1],
                          wire_sent=after[2] - before[1][2]))
        timeline.append(dict(compute_s=forward_backward - seconds[0] + time.perf_counter() - start,
                             comm_s=seconds[0], allreduce_s=allreduce))
    with torch.no_grad():
        correct = global_correct(forward([0.0]), y_own, masks) / q     # q processes hold each row
    return OperatorRank(rank=dist.get_rank(), mode=mode, ordering=ordering, losses=losses, epoch_wire_sent=wire,
                        epoch_model=model, timeline=timeline, sizes=plan.sizes,
                        val_acc=round(float(correct[0])) / totals["val"],
                        test_acc=round(float(correct[1])) / totals["test"],
                        weights={name: t.detach() for name, t in w.items()})


def run_operator(dataset: str = "cora", mode: str = "1d", processes: int = 4, ordering: str = "natural",
                 epochs: int = 10, hidden: int = 16, seed: int = 0, deadline_s: float = 120.0,
                 **options: Any) -> list[OperatorRank]:
    """:func:`train` on ``processes`` real processes; ValueError for a bad mode, a non-square
    2D grid or an unknown ordering, before anything starts.

    More than 8 parameters: ``options`` go, as JSON, to every rank's :func:`train` unchanged.
    """
    from ..base.launch import run
    from .partitioners import METHODS

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if mode == "2d":
        grid_side(processes)
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    if ordering != "natural" and ordering not in METHODS:
        raise ValueError(f"unknown ordering {ordering!r}; choose natural or one of {', '.join(METHODS)}")
    args = dict(dataset=dataset, mode=mode, ordering=ordering, epochs=epochs, hidden=hidden, seed=seed, **options)
    return run("gnnbook.ch6_fullgraph.spmm:train", processes, args, deadline_s=deadline_s)
