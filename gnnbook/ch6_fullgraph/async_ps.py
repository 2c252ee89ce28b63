"""Full-graph GCN training without a per-epoch barrier: K workers and a parameter server, bounded staleness
(book 6.3).

Book: 6.3 asynchronous training (6.3.1 the asynchronous execution model, 6.3.2 asynchronous protocols).

Used in: chapters/06c_sync_and_async_protocols.ipynb.

Rank 0 is a parameter server; ranks 1..K are workers, each owning one part of the graph (METIS), the
input features of its halo and nothing else.  A worker's iteration is one epoch of its part:

1. layer 1 aggregates over its nodes and its halo from the input features (exact: the halo's features
   are held locally, only the current weights are needed);
2. layer 2 needs the halo's *hidden* rows, which other workers compute: it uses the latest rows the
   server has handed it, and adds to its own boundary rows the gradients its peers sent for them
   (both as old as the server's copy: the staleness is measured, below);
3. it pushes to the server its weight gradients, its boundary hidden rows and the gradients of its halo
   rows, and waits for the reply: the current weights, its halo rows and the gradients for its rows.

The server keeps the weights (Adam), the latest boundary rows of every worker and the halo gradients
still to deliver.  Two protocols, the same messages:

- ``"sync"``: the server answers nobody until every worker has pushed the same iteration, sums the K
  gradients and takes one step: a barrier per epoch (bulk synchronous), as in the rest of chapter 6
  but for the halo rows, which are one epoch old here as in PipeGCN;
- ``"async"``: the server applies every gradient when it arrives (one step each, at ``lr / K``: a push
  carries 1/K of the data, like one minibatch of K) and answers a worker at once, unless that worker is
  more than ``staleness`` iterations ahead of the slowest (stale synchronous parallel, Ho et al. 2013;
  the bound that asynchronous GNN systems such as Dorylus and the protocols the book surveys keep).

A **straggler** is injected: before its iteration ``i`` worker ``(seed + i) mod K`` sleeps ``delay_s``
(the same schedule in both protocols): one worker slowed in every round, each in turn, as a periodic
background job or pause would do.  Under the barrier every epoch waits for that round's slow worker, so
an epoch costs about ``delay_s`` more; without it each worker pays only for its own slow iterations,
one in K, so about ``delay_s / K`` more, as long as the bound does not stop it (a slow turn puts a
worker one iteration behind, well within a bound of 1 or more).  A worker slow in *every* iteration
would hold any bounded-staleness run to its pace, which is what the bound is for (chapter 3.4.2
shows both cases on a parameter server of its own).

Every worker records how old what it used was: for each iteration the lag, in iterations, of each peer's
rows (``halo_lag``: 1 under the barrier, up to ``staleness + 1`` without it); the server records, for
every gradient it applies, how many updates were applied since the weights it was computed with
(``weight_lag``: 0 under the barrier).  Accuracy: the server keeps the weights every ``eval_every``
epochs' worth of updates and evaluates them after training with one exact full-graph forward; the test
accuracy at the best validation accuracy is reported.

Example:
    >>> from gnnbook.base.launch import run
    >>> out = run("gnnbook.ch6_fullgraph.async_ps:train", 3, dict(mode="async", epochs=10, delay_s=0.0),
    ...           deadline_s=120)                                                       # doctest: +SKIP
    >>> out[0].updates, len(out[1].epoch_s)                                            # doctest: +SKIP
    (20, 10)
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..base.records import record
from ..training.train import AccuracyCurve, correct_predictions
from .subgraph import LocalGraph, load_problem, local_graph, shared_assignment

__all__ = ["MODES", "train", "straggler_schedule", "ServerRun", "WorkerRun"]

MODES = ("sync", "async")
_INIT, _GRADIENT = 0.0, 1.0


@record
@dataclass
class ServerRun:
    """What :func:`train`'s rank 0, the parameter server, measured."""

    mode: str
    staleness: int
    wall_s: float  # the whole run
    epoch_s: float  # wall_s per epoch
    updates: int  # optimiser steps it applied
    weight_lag: list[int]  # per push: updates applied since the pushing worker pulled its weights
    curve: AccuracyCurve  # validation and test accuracy every eval_every updates, and the best of them


@record
@dataclass
class WorkerRun:
    """What one of :func:`train`'s workers (ranks 1..K) measured."""

    worker: int
    epoch_s: list[float]  # seconds per iteration
    seconds: float
    waited_s: float  # for the server's answers
    halo_lag: list[int]  # per iteration: how many iterations old the halo rows it used were (the oldest peer)
    slowed: int  # iterations it was the injected straggler
    losses: list[float]


def straggler_schedule(workers: int, iterations: int, seed: int = 0) -> list[int]:
    """The worker (0-based) slowed in each iteration: each in turn, starting at ``seed mod workers``.

    Example:
        >>> straggler_schedule(3, 5, seed=1)
        [1, 2, 0, 1, 2]
    """
    return [(seed + i) % workers for i in range(iterations)]


def _flat(w: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in w.values()])


def _unflat(flat: torch.Tensor, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out, offset = {}, 0
    for name, t in like.items():
        out[name] = flat[offset:offset + t.numel()].view_as(t).clone()
        offset += t.numel()
    return out


def _segment(counts: list[int], peer: int) -> slice:
    start = sum(counts[:peer])
    return slice(start, start + counts[peer])


def train(dataset: str = "cora", mode: str = "async", staleness: int = 4, epochs: int = 60, delay_s: float = 0.05,
          partitioner: str = "metis", hidden: int = 16, lr: float = 0.05, weight_decay: float = 5e-4,
          eval_every: int = 5, seed: int = 0) -> ServerRun | WorkerRun:
    """Run in each of K + 1 processes (rank 0 the server).  The server returns the run's wall time, the
    updates it applied, their weight lags and the accuracy; each worker its seconds per iteration, the
    time it waited for the server, the lag of the halo rows it used and how often it was slowed.

    More than 8 parameters: a rank's entry point for gnnbook.base.launch.run, whose arguments arrive in each
    process as JSON: each knob is its own argument (no settings objects across processes).
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if staleness < 0 or epochs < 1 or delay_s < 0 or eval_every < 1:
        raise ValueError("staleness >= 0, epochs >= 1, delay_s >= 0 and eval_every >= 1, please")
    rank, workers = dist.get_rank(), dist.get_world_size() - 1
    if workers < 2:
        raise ValueError("needs at least 3 processes: a server and two workers")
    graph, x, labels, w0 = load_problem(dataset, "gcn", hidden, seed)
    # rank 0 partitions and every process receives the same parts (METIS may differ between processes)
    assignment = shared_assignment(graph, partitioner, seed, num_parts=workers)
    parts = [local_graph(graph, assignment, k, "gcn") for k in range(workers)]
    size = sum(t.numel() for t in w0.values())
    rows_max = max(sum(p.send_counts) + sum(p.recv_counts) for p in parts)
    shapes = dict(push=size + rows_max * hidden + 3, reply=size + rows_max * hidden + workers + 1)
    if rank == 0:
        return _serve(graph, x, labels, w0, parts, mode, staleness, epochs, lr, weight_decay, eval_every, hidden,
                      shapes)
    return _work(rank - 1, parts, x, labels, graph, w0, epochs, delay_s, seed, hidden, shapes)


def _work(k: int, parts: list[LocalGraph], x, labels, graph, w0, epochs: int, delay_s: float, seed: int,
          hidden: int, shapes: dict[str, int]) -> WorkerRun:
    part, workers = parts[k], len(parts)
    x_all = x[torch.cat([part.owned, part.halo])]          # this part's and its halo's input features
    y = labels[part.owned]
    train_mask = graph.ndata["train_mask"][part.owned]
    total_train = int(graph.ndata["train_mask"].sum())
    sends, recvs, size = sum(part.send_counts), sum(part.recv_counts), sum(t.numel() for t in w0.values())
    push, reply = torch.zeros(shapes["push"]), torch.zeros(shapes["reply"])
    slowed = [s == k for s in straggler_schedule(workers, epochs, seed)]

    def exchange(kind: float, grads: torch.Tensor, rows: torch.Tensor, halo_grads: torch.Tensor, loss: float):
        push.zero_()
        push[:size], push[size:size + sends * hidden] = grads, rows.reshape(-1)
        push[size + sends * hidden:size + (sends + recvs) * hidden] = halo_grads.reshape(-1)
        push[-3], push[-2] = kind, loss
        dist.send(push, 0)
        dist.recv(reply, 0)
        weights = _unflat(reply[:size], w0)
        halo = reply[size:size + recvs * hidden].view(recvs, hidden).clone()
        grad_in = reply[size + recvs * hidden:size + (recvs + sends) * hidden].view(sends, hidden).clone()
        versions = reply[size + (recvs + sends) * hidden:size + (recvs + sends) * hidden + workers].clone()
        return weights, halo, grad_in, versions

    def hidden_rows(w):
        return torch.relu(torch.sparse.mm(part.adjacency, x_all @ w["W1"]) + w["b1"])

    # the one barrier: every worker's first rows reach the server before anyone trains (nothing older exists)
    with torch.no_grad():
        first = hidden_rows(w0)[part.send_index]
    w, halo, grad_in, versions = exchange(_INIT, torch.zeros(size), first, torch.zeros(recvs, hidden), 0.0)
    epoch_s, waited_s, halo_lag, losses = [], 0.0, [], []
    start = time.perf_counter()
    for i in range(epochs):
        began = time.perf_counter()
        w = {n: t.requires_grad_(True) for n, t in w.items()}
        h1 = hidden_rows(w)
        halo_leaf = halo.requires_grad_(True)
        out = torch.sparse.mm(part.adjacency, torch.cat([h1, halo_leaf])) @ w["W2"] + w["b2"]
        loss = F.cross_entropy(out[train_mask], y[train_mask], reduction="sum") / total_train
        # the peers' (stale) gradients of this part's boundary rows enter backward here
        (loss + (h1[part.send_index] * grad_in).sum()).backward()
        lags = [i - int(versions[j]) for j in range(workers) if j != k and part.recv_counts[j]]
        halo_lag.append(max(lags, default=0))
        if slowed[i] and delay_s:
            time.sleep(delay_s)                            # the injected straggler
        wait_start = time.perf_counter()
        w, halo, grad_in, versions = exchange(_GRADIENT, _flat({n: t.grad for n, t in w.items()}),
                                              h1.detach()[part.send_index], halo_leaf.grad, float(loss))
        waited_s += time.perf_counter() - wait_start
        losses.append(float(loss))
        epoch_s.append(time.perf_counter() - began)
    return WorkerRun(worker=k, epoch_s=epoch_s, seconds=time.perf_counter() - start, waited_s=waited_s,
                     halo_lag=halo_lag, slowed=sum(slowed), losses=losses)


def _serve(graph, x, labels, w0, parts: list[LocalGraph], mode: str, staleness: int, epochs: int, lr: float,
           weight_decay: float, eval_every: int, hidden: int, shapes: dict[str, int]) -> ServerRun:
    workers, size = len(parts), sum(t.numel() for t in w0.values())
    w = {n: t.clone().requires_grad_(True) for n, t in w0.items()}
    opt = torch.optim.Adam(w.values(), lr=lr if mode == "sync" else lr / workers, weight_decay=weight_decay)
    rows = [torch.zeros(sum(p.send_counts), hidden) for p in parts]      # each worker's latest boundary rows
    grad_for = [torch.zeros(sum(p.send_counts), hidden) for p in parts]  # halo gradients not yet delivered
    version = [-1] * workers                                             # iteration that made rows[k]
    pushed = [0] * workers                                               # gradients received per worker
    pulled_at = [0] * workers                                            # updates applied when k last got weights
    waiting, started, finished = set(), 0, 0
    round_sum, weight_lag, snapshots, updates = torch.zeros(size), [], {}, 0
    push, reply = torch.zeros(shapes["push"]), torch.zeros(shapes["reply"])
    wall_start = None

    def step(grads: torch.Tensor) -> None:
        nonlocal updates
        opt.zero_grad()
        for n, g in _unflat(grads, w0).items():
            w[n].grad = g
        opt.step()
        updates += 1
        if updates % (eval_every * (1 if mode == "sync" else workers)) == 0:
            snapshots[updates] = {n: t.detach().clone() for n, t in w.items()}

    def answer(j: int) -> None:
        part = parts[j]
        halo = torch.cat([rows[p][_segment(parts[p].send_counts, j)] for p in range(workers)]) \
            if sum(part.recv_counts) else torch.zeros(0, hidden)
        recvs, sends = sum(part.recv_counts), sum(part.send_counts)
        reply.zero_()
        reply[:size] = _flat({n: t.detach() for n, t in w.items()})
        reply[size:size + recvs * hidden] = halo.reshape(-1)
        reply[size + recvs * hidden:size + (recvs + sends) * hidden] = grad_for[j].reshape(-1)
        reply[size + (recvs + sends) * hidden:
              size + (recvs + sends) * hidden + workers] = torch.tensor(version, dtype=torch.float32)
        grad_for[j].zero_()
        pulled_at[j] = updates
        dist.send(reply, j + 1)

    while finished < workers:
        k = dist.recv(push) - 1                           # from whichever worker pushes next
        part, sends, recvs = parts[k], sum(parts[k].send_counts), sum(parts[k].recv_counts)
        rows[k] = push[size:size + sends * hidden].view(sends, hidden).clone()
        halo_grads = push[size + sends * hidden:size + (sends + recvs) * hidden].view(recvs, hidden)
        for p in range(workers):                          # k's halo rows from p are p's boundary rows for k
            if part.recv_counts[p]:
                grad_for[p][_segment(parts[p].send_counts, k)] += halo_grads[_segment(part.recv_counts, p)]
        if push[-3] == _INIT:
            started += 1
            waiting.add(k)
            if started == workers:                        # everyone's first rows are in: training starts
                wall_start = time.perf_counter()
                for j in sorted(waiting):
                    answer(j)
                waiting.clear()
            continue
        version[k] = pushed[k]
        pushed[k] += 1
        grads = push[:size].clone()
        if mode == "async":
            weight_lag.append(updates - pulled_at[k])
            step(grads)
        else:
            weight_lag.append(0)
            round_sum += grads
        waiting.add(k)
        slowest = min(pushed)
        if mode == "sync" and slowest == max(pushed):     # the round is complete: one step with the sum
            step(round_sum)
            round_sum.zero_()
        for j in sorted(waiting):
            if mode == "sync" and pushed[j] != slowest:
                continue
            if mode == "async" and pushed[j] - slowest > staleness:
                continue
            waiting.discard(j)
            answer(j)
            finished += pushed[j] == epochs
    wall_s = time.perf_counter() - wall_start
    snapshots[updates] = {n: t.detach().clone() for n, t in w.items()}
    return ServerRun(mode=mode, staleness=staleness, wall_s=wall_s, epoch_s=wall_s / epochs, updates=updates,
                     weight_lag=weight_lag, curve=_evaluate(graph, x, labels, snapshots))


def _evaluate(graph, x, labels, snapshots: dict[int, dict[str, torch.Tensor]]):
    """Every snapshot's validation and test accuracy, one exact full-graph forward each (in the server)."""
    whole = local_graph(graph, torch.zeros(graph.num_nodes(), dtype=torch.int64), 0, "gcn")
    masks = {m: graph.ndata[f"{m}_mask"] for m in ("val", "test")}
    curve = AccuracyCurve()
    with torch.no_grad():
        for update, w in sorted(snapshots.items()):
            h = torch.relu(torch.sparse.mm(whole.adjacency, x @ w["W1"]) + w["b1"])
            logits = torch.sparse.mm(whole.adjacency, h) @ w["W2"] + w["b2"]
            val, test = (correct_predictions(logits[masks[m]], labels[masks[m]]) / int(masks[m].sum())
                         for m in ("val", "test"))
            curve.add(update, val, test)
    return curve
