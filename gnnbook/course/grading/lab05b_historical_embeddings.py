"""Lab 5b's checks (book 5.2.3, ``labs/lab05b_historical_embeddings.ipynb``): a GAS history table, a batch forward
through it, and training with both.

Book: 5.2.3 historical embeddings (lab 5b).

Used in: labs/lab05b_historical_embeddings.ipynb.

The checks hold the graphs, models, tables and test labels; the student (in the autograder a sandboxed
process, here the notebook) runs the calls of :mod:`~gnnbook.course.grading.training_calls`.
:func:`check_history` sends pushes and pulls of its own to ``MyHistory`` and replays them here.
:func:`check_forward` sends a GCN's weights, its features, batches and starting tables: with the exact
embeddings in the tables the logits must be the full graph's rows, and with other tables (and dropout on,
seeded) they and the pushed tables must be what the package's ``gcn_forward`` gives on the same tables
here.  :func:`check_training` has the package's GAS trainer run with the student's forward and history (test
labels hidden there), scores the returned logits here, and compares accuracy and staleness with the
package's own history trained here.

Example:
    >>> check_history(Here(globals()))        # doctest: +SKIP
    {'cases': 2}
"""
from __future__ import annotations

from typing import Any

import torch

from ...ch5_minibatch import history as H
from ...data import load_dataset
from ...models import build_model
from ...training.train import Optim, accuracy, model_input
from ..vetting import Policy
from .engine import Check
from .student import Here, hide_test_labels
from .training_calls import LAB05B_PRELUDE, batch_payload

__all__ = ["CHECKS", "Here", "POLICY", "PRELUDE", "check_forward", "check_history", "check_training"]

PRELUDE = LAB05B_PRELUDE
POLICY = Policy(modules=("torch", "math"), references=("History", "gcn_forward", "exact_embeddings", "exact_pass",
                                                       "refresh", "full_forward", "staleness"))
LAB_GRAPHS = ("cora", "citeseer")


def _history_case(num_nodes: int, width: int, num_tables: int, generator: torch.Generator) -> list[list[Any]]:
    """Pushes of random rows to every table in turn, each followed by a pull of random rows (repeats included)."""
    ops: list[list[Any]] = []
    for step in range(2 * num_tables):
        nodes = torch.randperm(num_nodes, generator=generator)[:max(1, num_nodes // 2)]
        ops.append(["push", step % num_tables, nodes, torch.randn(len(nodes), width, generator=generator)])
        ops.append(["pull", step % num_tables, torch.randint(num_nodes, (num_nodes + 3,), generator=generator)])
    return ops


def check_history(student, thorough: bool = False) -> dict[str, Any]:
    """Task 1: a new history holds zero tables of the right shape; push writes detached copies of the rows where they
    belong (the pushed tensor needs gradients and is changed afterwards); pull reads rows back in the order asked."""
    rows = torch.arange(8.0).view(2, 4)
    cases = {(6, 4, 2): [["push", 1, torch.tensor([4, 1]), rows], ["pull", 1, torch.tensor([1, 4, 0])],
                         ["push", 0, torch.tensor([2]), torch.ones(1, 4)], ["pull", 0, torch.tensor([2])]]}
    sizes = [(23, 5, 3)] + ([(101, 7, 2), (9, 1, 4)] if thorough else [])
    for size in sizes:
        cases[size] = _history_case(*size, torch.Generator().manual_seed(size[0]))
    replies = student.run([("lab05b.history", {"num_nodes": n, "width": w, "num_tables": t, "ops": ops})
                           for (n, w, t), ops in cases.items()])
    for ((n, w, t), ops), r in zip(cases.items(), replies):
        where = f"MyHistory({n}, {w}, {t})"
        assert len(r["start"]) == t and all(tuple(s.shape) == (n, w) and not bool(s.any()) for s in r["start"]), \
            f"{where}: a new history holds {t} tables of zeros, {n} x {w}"
        assert not any(r["needs_grad"]), f"{where}: push must store values (detach): no gradient flows into a history"
        expected, pulls, pushes = [torch.zeros(n, w) for _ in range(t)], iter(r["pulls"]), 0
        for op in ops:
            if op[0] == "push":
                expected[op[1]][op[2]] = op[3]
                pushes += 1
                continue
            got = next(pulls)
            assert tuple(got.shape) == (len(op[2]), w) and torch.equal(got, expected[op[1]][op[2]]), (
                f"{where}: pull({op[1]}, ...) after {pushes} pushes does not give the rows last pushed there "
                "(a history stores copies: changing a pushed tensor afterwards must not change the table)")
        assert all(torch.equal(a, b) for a, b in zip(r["end"], expected)), f"{where}: a push wrote outside its rows"
    return {"cases": len(cases)}


def _model_payload(net: torch.nn.Module, in_feats: int, classes: int, layers: int) -> dict[str, Any]:
    return {"in_feats": in_feats, "classes": classes, "layers": layers,
            "state": {k: v.detach().clone() for k, v in net.state_dict().items()}}


def check_forward(student, thorough: bool = False, dataset: str = "cora") -> dict[str, Any]:
    """Task 2: with the exact embeddings in its tables, the student's forward gives every batch the full graph's
    logits and leaves the tables exact; with other tables, without and with dropout (seeded), its logits and
    the tables it leaves equal the package's ``gcn_forward`` on the same tables, here."""
    graph = load_dataset(dataset if dataset in LAB_GRAPHS else "cora")
    cases = [(40, 10, 2, 0)] + ([(24, 5, 3, 7)] if thorough else [])      # clusters, per batch, layers, seed
    for parts, per_batch, depth, seed in cases:
        case = f"{depth}-layer GCN, {parts} clusters, {per_batch} per batch"
        setup = H.build_setup(graph, parts, per_batch, seed=seed)
        g = setup.graph
        classes = int(g.ndata["label"].max()) + 1
        torch.manual_seed(seed)
        net = build_model("gcn", g.ndata["feat"].shape[1], classes, num_layers=depth).eval()
        x = model_input(net, g.ndata["feat"])
        width, num_tables = net.layers[0].bias.shape[0], len(net.layers) - 1
        batches = [H.make_batch(setup, torch.cat(setup.clusters[c:c + per_batch])) for c in range(0, parts, per_batch)]
        with torch.no_grad():
            full, exact_rows = net(g, x), H.exact_embeddings(net, setup, x)
        generator = torch.Generator().manual_seed(seed + 1)
        start = [torch.rand(g.num_nodes(), width, generator=generator) for _ in range(num_tables)]
        stale_steps = [[training, b, 1000 + i]
                       for i, (training, b) in enumerate((t, b) for t in (False, True) for b in (0, 1))]
        common = {"model": _model_payload(net, g.ndata["feat"].shape[1], classes, depth), "x": x,
                  "num_nodes": g.num_nodes(), "batches": [batch_payload(b) for b in batches]}
        exact, stale = student.run([
            ("lab05b.forward", common | {"tables": exact_rows, "steps": [[False, i, 0] for i in range(len(batches))]}),
            ("lab05b.forward", common | {"tables": start, "steps": stale_steps})])
        # 1. an exact history: every batch's logits are the full graph's rows, and the history stays exact
        for b, out in zip(batches, exact["logits"]):
            assert tuple(out.shape) == (len(b.nodes), full.shape[1]), \
                f"{case}: one row per in-batch node, got {tuple(out.shape)}"
            gap = float((out - full[b.nodes]).abs().max())
            assert gap < 1e-5, (
                f"{case}: with an exact history the batch's logits differ from the full graph's by {gap:.2e}")
        left = H.History(g.num_nodes(), width, num_tables)
        for table, rows in zip(left.tables, exact["tables"]):
            table.copy_(rows)
        assert max(H.staleness(left, net, setup, x)) < 1e-6, \
            f"{case}: pushing exact rows must leave the history exact (push each hidden layer's activations)"
        # 2. other tables, without and with dropout: GAS's logits and pushes on the same tables and seeds, here
        theirs = H.History(g.num_nodes(), width, num_tables)
        for table, rows in zip(theirs.tables, start):
            table.copy_(rows)
        for i, ((training, b, step_seed), out) in enumerate(zip(stale_steps, stale["logits"])):
            net.train(training)
            torch.manual_seed(step_seed)
            want = H.gcn_forward(net, batches[b], x, theirs).detach()
            gap = float((out - want).abs().max()) if out.shape == want.shape else float("inf")
            assert gap < 1e-5, (f"{case}, step {i} {'with dropout (training)' if training else 'without dropout'}: "
                                f"your logits differ by {gap:.2e} from GAS's on the same history; pull the halo's "
                                "rows of table i - 1, stack them under the batch's rows, then apply model.dropout once")
        net.eval()
        for layer, (a, b) in enumerate(zip(stale["tables"], theirs.tables)):
            assert torch.allclose(a, b, atol=1e-6), (f"{case}: table {layer} is not what GAS pushes: push the in-batch "
                                                     "rows of every hidden layer's output, before dropout")
    return {"cases": len(cases)}


def check_training(student, thorough: bool = False, dataset: str = "cora", epochs: int = 100) -> dict[str, Any]:
    """Task 3: the package's GAS trainer with the student's forward and history (seed 0, 40 METIS clusters of 10 per
    batch, at least 100 epochs) reaches the package's own history's test accuracy within 2 points and its mean
    staleness within 10%; both runs are returned as :class:`~gnnbook.ch5_minibatch.history.HistoryResult`."""
    dataset = dataset if dataset in LAB_GRAPHS else "cora"
    graph, epochs = load_dataset(dataset), max(100, int(epochs))
    (r,) = student.run([("lab05b.train", {"graph": hide_test_labels(graph), "epochs": epochs, "num_parts": 40,
                                          "per_batch": 10, "seed": 0})])
    test = graph.ndata["test_mask"]
    yours = H.HistoryResult(test_acc=accuracy(r.pop("logits")[test], graph.ndata["label"][test]), **r)
    reference = H.train(graph, "gas", optim=Optim(0, epochs=epochs, patience=epochs), clusters=H.Clusters(40, 10))
    assert len(yours.staleness) == yours.epochs_run, (
        "the trainer measured no staleness: keep your tables in self.tables")
    stale_yours = sum(s[0] for s in yours.staleness) / len(yours.staleness)
    stale_ref = sum(s[0] for s in reference.staleness) / len(reference.staleness)
    assert abs(yours.test_acc - reference.test_acc) <= 0.02 and abs(stale_yours - stale_ref) <= 0.1 * stale_ref, (
        f"yours: test {yours.test_acc:.3f}, staleness {stale_yours:.3f}; package: {reference.test_acc:.3f}, "
        f"{stale_ref:.3f}")
    return {"yours": yours, "reference": reference, "stale_yours": stale_yours, "stale_reference": stale_ref,
            "dataset": dataset, "epochs": epochs}


CHECKS = (Check(1, "push writes detached rows where they belong, pull reads them back in the order asked",
                check_history),
          Check(2, "exact with an exact history; GAS's logits and pushes on any other", check_forward),
          Check(3, "your history trains like the package's: accuracy within 2 points, staleness within 10%",
                check_training))
