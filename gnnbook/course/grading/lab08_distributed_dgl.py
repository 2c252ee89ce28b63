"""Lab 8's checks (book 8.3, ``labs/lab08_distributed_dgl.ipynb``): an edge cut, a setup for the distributed trainer,
and the steps every trainer takes.

Book: 8.3.1 dataset preprocessing; 8.3.3-8.3.4 training on one machine and on a cluster (lab 8).

Used in: labs/lab08_distributed_dgl.ipynb.

The student (in the autograder a sandboxed process, here the notebook) only computes: an edge cut from edges
and owners, a choice of partitioning and fanouts, a prediction of steps.  The checks hold everything else:
:func:`check_edge_cut` sends hand-made graphs and both partitionings of Cora and compares with what
``load_partition`` reads back; :func:`check_setup` runs the real distributed job (DistDGL servers and
trainers on 2 emulated machines, :class:`~gnnbook.distributed.LocalCluster`) with the student's choice, here;
:func:`check_steps` compares the prediction with shares of its own and with the steps that job's trainers
took.

Example:
    >>> check_edge_cut(Here(globals()))["cut"]["metis"] < 0.1     # doctest: +SKIP
    True
"""
from __future__ import annotations

import json
from typing import Any

import torch

from ...distributed import LocalCluster, TrainConfig, cached_partition, load_partition
from ...distributed.baseline import whole_graph
from ...distributed.leftovers import leftovers
from ..vetting import Policy
from .engine import Check
from .student import LAB08_PRELUDE, Here

__all__ = ["CHECKS", "Here", "POLICY", "PRELUDE", "TEACHER_SETUP", "check_edge_cut", "check_setup", "check_steps",
           "distributed_job"]

PRELUDE = LAB08_PRELUDE
POLICY = Policy(modules=("torch", "math", "json"), references=("partition_metrics", "full_graph_boundary",
                                                               "load_partition", "whole_graph"))
TARGET_ACC, MAX_REMOTE_ROWS, MAX_EPOCHS = 0.78, 120, 20      # the teacher's floors
TEACHER_SETUP = ("metis", [3, 3])
_JOBS: dict[tuple, dict[str, Any]] = {}     # one job per setup and grading run: the steps check reuses the setup's


def _owners(part_config) -> torch.Tensor:
    ranges = json.loads(part_config.read_text())["node_map"]["_N"]
    return torch.cat([torch.full((hi - lo,), p) for p, (lo, hi) in enumerate(ranges)])


def check_edge_cut(student, thorough: bool = False) -> dict[str, Any]:
    """Task 1: the edge cut (self-loops not counted) of hand-made graphs, and of Cora's METIS and random 2-way
    partitions as ``load_partition`` reads them back; METIS must cut far fewer edges than random."""
    cases = [((0, 1, 2, 0), (1, 2, 3, 0), (0, 0, 1, 1), 1 / 3)]     # path 0-1-2-3 cut after node 1, a self-loop
    if thorough:
        cases.append(((0, 1, 2, 3, 3, 4), (4, 2, 2, 0, 1, 4), (0, 1, 1, 2, 0), 1 / 2))
    graphs = {}
    for method in ("metis", "random"):
        cfg = cached_partition("cora", 2, method)
        graphs[method] = (*whole_graph(cfg).edges(), _owners(cfg), load_partition(cfg).edge_cut_fraction)
    inputs = [(torch.tensor(s), torch.tensor(d), torch.tensor(o), e) for s, d, o, e in cases] + list(graphs.values())
    replies = student.run([("lab08.edge_cut", {"src": s, "dst": d, "owner": o}) for s, d, o, _ in inputs])
    for (src, dst, owner, expected), got in zip(inputs[:len(cases)], replies):
        assert abs(got - expected) < 1e-9, \
            (f"edges {list(zip(src.tolist(), dst.tolist()))}, owners {owner.tolist()}: "
             f"expected {expected:.4f}, got {got}")
    cut = dict(zip(graphs, replies[len(cases):]))
    for method, (_, _, _, expected) in graphs.items():
        assert abs(cut[method] - expected) < 1e-9, f"{method}: yours {cut[method]:.4f}, load_partition {expected:.4f}"
    assert cut["metis"] < 0.3 * cut["random"], f"METIS cut {cut['metis']:.3f}, random {cut['random']:.3f}"
    return {"cut": cut, "metis": cut["metis"], "random": cut["random"]}


def distributed_job(method: str, fanouts: list[int], num_trainers: int = 1, epochs: int = MAX_EPOCHS,
                    deadline_s: float = 240.0) -> dict[str, Any]:
    """The lab's distributed job (GraphSAGE on Cora, 2 emulated machines, seed 0), once per setup and process;
    nothing of the student runs in it."""
    key = (method, tuple(fanouts), num_trainers, epochs)
    if key not in _JOBS:
        before = set(leftovers().processes)      # the grader's own children (a student's sandboxed process) stay
        with LocalCluster(cached_partition("cora", 2, method), num_trainers=num_trainers,
                          deadline_s=deadline_s) as cluster:
            job = cluster.train(TrainConfig(model="sage", epochs=epochs, fanouts=list(fanouts), seed=0))
        found = leftovers()   # this process's children and its jobs' shared memory
        found.processes = [pid for pid in found.processes if pid not in before]
        assert not found, f"the distributed job left {found}"
        _JOBS[key] = job
    return _JOBS[key]


def _choice(student) -> tuple[str, list[int]]:
    (choice,) = student.run([("lab08.choice", {})])
    method, fanouts = choice["method"], choice["fanouts"]
    assert method in ("metis", "random"), f"method must be 'metis' or 'random', got {method}"
    assert isinstance(fanouts, list) and len(fanouts) == 2 and all(isinstance(f, int) and f >= 1 for f in fanouts), \
        f"two positive fanouts, got {fanouts}"
    return method, fanouts


def check_setup(student, thorough: bool = False, num_trainers: int = 1, epochs: int = MAX_EPOCHS,
                target_acc: float = TARGET_ACC, max_remote_rows: int = MAX_REMOTE_ROWS,
                deadline_s: float = 240.0) -> dict[str, Any]:
    """Task 2: the real distributed job with the student's partitioning and fanouts (run here) reaches at least
    ``max(target_acc, 0.78)`` test accuracy with at most ``min(max_remote_rows, 120)`` remote feature rows per epoch."""
    method, fanouts = _choice(student)
    target, budget = max(target_acc, TARGET_ACC), min(max_remote_rows, MAX_REMOTE_ROWS)
    job = distributed_job(method, fanouts, 2 if num_trainers == 2 else 1, min(epochs, MAX_EPOCHS), deadline_s)
    remote_per_epoch = sum(job["feature_rows"]["remote"]) / job["epochs_run"]
    assert job["test_acc"] >= target, (
        f"{method} {fanouts}: test accuracy {job['test_acc']:.3f} is below the target {target}")
    assert remote_per_epoch <= budget, (
        f"{method} {fanouts}: {remote_per_epoch:.0f} remote rows per epoch, more than {budget}")
    return {"job": job, "method": method, "fanouts": fanouts, "test_acc": job["test_acc"],
            "remote_per_epoch": remote_per_epoch, "target": target, "budget": budget}


def check_steps(student, thorough: bool = False, job: dict[str, Any] | None = None) -> dict[str, Any]:
    """Task 3: ``expected_steps`` on shares the check chooses, and on the shares of a real job (``job``; else the job
    of the student's setup, or of the teacher's when that one is not valid) against the steps its trainers took."""
    cases = [(([70, 71], 16, 2), [10, 10])]          # the larger share is truncated to 70 nodes: 5 steps per epoch
    if thorough:
        cases += [(([100, 64, 99], 32, 3), [6, 6, 6]), (([5], 8, 4), [4])]
    replies = student.run([("lab08.steps", {"shares": list(a[0]), "batch_size": a[1], "epochs": a[2]})
                           for a, _ in cases])
    for (args, expected), got in zip(cases, replies):
        assert got == list(expected), f"expected_steps{tuple(args)}: expected {list(expected)}, got {got}"
    if job is None:      # only now: a job takes seconds, a wrong prediction is found without one
        try:
            setup = _choice(student)
        except AssertionError:
            setup = TEACHER_SETUP
        job = distributed_job(*setup)
    args = (job["train_nodes_per_trainer"], job["config"]["batch_size"], job["epochs_run"])
    (predicted,) = student.run([("lab08.steps", {"shares": list(args[0]), "batch_size": args[1], "epochs": args[2]})])
    assert predicted == job["steps_per_trainer"], \
        f"expected_steps{args}: predicted {predicted}, the trainers took {job['steps_per_trainer']}"
    return {"predicted": predicted, "steps": job["steps_per_trainer"], "cases": len(cases) + 1}


CHECKS = (Check(1, "your edge cut matches the partition read-back on hand-made graphs and both partitionings",
                check_edge_cut),
          Check(2, "the distributed job with your setup reaches the target accuracy within the remote-traffic budget",
                check_setup),
          Check(3, "your expected_steps on the check's shares and on the steps the job's trainers took", check_steps))
