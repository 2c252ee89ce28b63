"""The DistDGL trainer: ``python -m gnnbook.distributed.trainer --part-config CFG ...``.

Book: 8.3 distributed training; 5.1 the naive distributed flow.

Used in: no notebook directly.

Run by the launcher (:mod:`gnnbook.distributed.launcher`) in every server and
trainer process, like any DistDGL script: in a server
``dgl.distributed.initialize`` serves its partition and never returns; in a
trainer it connects to all servers.  Then each trainer

1. opens the :class:`dgl.distributed.DistGraph` (its own partition through
   shared memory, the others through RPC to their servers);
2. takes its share of the training nodes with ``node_split`` (nodes of its own
   partition first) and truncates it to the smallest share of any rank, so all
   ranks take the same number of steps: with one step fewer on one rank the
   others would wait forever in the gradient all-reduce;
3. samples neighbours with ``DistNodeDataLoader`` and trains GraphSAGE or GAT,
   averaging gradients with one explicit all-reduce (gloo) per step, so that
   each stage of a step is timed on its own (:mod:`~gnnbook.distributed.stages`);
4. evaluates validation and test accuracy each epoch, each rank on its share
   with all neighbours, summed with an all-reduce;
5. counts the feature rows each minibatch reads from its own partition (local,
   shared memory) and from other partitions (remote, RPC), using the partition book,
   with the bytes fetched remotely; with ``--cache-policy`` a cache of remote rows
   (:mod:`~gnnbook.distributed.feature_cache`) serves hits, and only misses are
   fetched; it also counts the sampled neighbours that live on another partition;
6. saves a checkpoint after every epoch (``--resume`` continues from it,
   refusing a missing one or one saved by another run, see
   :mod:`~gnnbook.distributed.checkpoint`; every epoch re-seeds from (seed,
   epoch, rank), but a resumed run's minibatch order still differs from an
   uninterrupted run's: DGL's loader shuffles its previous order in place, and
   the resumed loader starts from the unshuffled one);
7. with ``--runs N``, trains N times with seeds seed, seed + 1, ... (the servers and processes start
   once: on 2 cores a job's start-up takes longer than a run on Cora);
8. trainer rank 0 writes the JSON result (``--out``).

Node data are ``feat`` / ``label`` in gnnbook's partitions and ``features`` /
``labels`` in DGL's examples: both are found (``--feat-name`` / ``--label-name``
name others).  In an emulated job every process first checks that the DGL
adaptation is active and that it is on its own machine's partition
(:func:`gnnbook.distributed.emulation.verify`).

Without ``DGL_DIST_MODE`` (standalone mode) one process trains on a
one-partition config with no servers: :func:`train_standalone` does this inside
a notebook, for debugging.

Example:
    >>> result = train_standalone("cache/cora-1/cora.json", TrainConfig(epochs=2))  # doctest: +SKIP
    >>> sorted(result)[:3]                                                         # doctest: +SKIP
    ['best_epoch', 'config', 'epoch_seconds']
"""
from __future__ import annotations

import argparse
import faulthandler
import ipaddress
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

import dgl
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..base.seeding import set_seed
from ..training.train import best_epoch_row, correct_predictions
from . import emulation
from .checkpoint import identity, load_checkpoint, resume_state, save_checkpoint
from .config import TrainConfig, make_model, node_data_keys
from .demo_interfaces import exercise_all
from .feature_cache import FeatureCache, cache_capacity, presample_counts, remote_candidates, select_cached_nodes
from .partition_files import OpenedPartition, open_partition
from .progress import format_epoch_line
from .repeatable import check_repeatable, seed_own_sampling, seed_remote_servers
from .launcher import DGL_SERVER_PORT, LaunchError, read_host_file
from .store import listening_ports
from .stages import STAGES, StageClock, count_remote_neighbours, owner_lookup, start_allreduce

__all__ = ["load_checkpoint", "main", "run", "train_standalone"]


def _distributed() -> bool:
    return os.environ.get("DGL_DIST_MODE", "standalone") != "standalone"


def _reduce(values: list[float], op=dist.ReduceOp.SUM) -> list[float]:
    if not _distributed():
        return values
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=op)
    return t.tolist()


def _gather(values: list[float]) -> list[list[float]]:
    if not _distributed():
        return [values]
    t = torch.tensor(values, dtype=torch.float64)
    out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return [o.tolist() for o in out]


@dataclass
class RankEpoch:
    """What one rank counted and timed in one epoch; every rank's is gathered after the epoch
    (:meth:`gather`) and becomes one list per field in the history (rank order)."""

    steps: int
    local_rows: int  # feature rows read from this machine
    remote_rows: int  # read from another machine's server (cache misses)
    seconds: float  # the epoch's training loop, evaluation excluded
    loss: float  # mean over this rank's steps
    cache_hits: int
    remote_bytes: int
    step_seconds: float  # inside steps (the loop's own overhead excluded)
    sampled_neighbours: int
    remote_neighbours: int  # on another machine than the node that sampled them
    trainer_remote_neighbours: int  # on another machine than this trainer
    cache_mismatched_rows: int
    stage_seconds: dict[str, float]  # STAGES -> seconds

    def gather(self) -> list["RankEpoch"]:
        """Every rank's record (one all-gather of their numbers), in rank order."""
        names = [f.name for f in fields(self) if f.name != "stage_seconds"]
        numbers = [float(getattr(self, n)) for n in names] + [self.stage_seconds[s] for s in STAGES]
        kinds = {f.name: f.type for f in fields(self)}
        return [RankEpoch(**{n: float(v) if kinds[n] == "float" else int(v) for n, v in zip(names, row)},
                          stage_seconds=dict(zip(STAGES, row[len(names):])))
                for row in _gather(numbers)]


def _num_classes(g, config: Mapping[str, Any], label_key: str) -> int:
    extra = config.get("gnnbook", {})
    if "num_classes" in extra:
        return int(extra["num_classes"])
    return int(g.ndata[label_key][0:g.num_nodes()].max()) + 1


def _evaluate(model, g, loader, feat_key: str, label_key: str) -> tuple[float, float]:
    """(correct, total) over this rank's share, all neighbours."""
    correct = total = 0
    with torch.no_grad():
        for input_nodes, seeds, blocks in loader:
            logits = model(blocks, g.ndata[feat_key][input_nodes])
            correct += correct_predictions(logits, g.ndata[label_key][seeds].long())
            total += len(seeds)
    return correct, total


def _feature_cache(g, book, feat_key: str, new_loader, config: TrainConfig, rank: int) -> FeatureCache:
    """This trainer's cache of remote rows as ``config`` asks (empty for policy none), filled from the servers."""
    num_nodes, own = g.num_nodes(), book.partid
    chosen = torch.zeros(0, dtype=torch.int64)
    if config.cache_policy != "none":
        candidates = remote_candidates(book.nid2partid, own, num_nodes)
        if config.cache_policy == "degree":  # in-degree by RPC: the graphs are symmetric, so it is the out-degree
            scores = g.in_degrees(candidates)
        else:  # presample: one epoch of this trainer's own sampler, seeded, before training
            set_seed(config.seed * 7919 + rank)
            # A loader of its own: DGL's shuffles the previous epoch's order in place, so a pass over the
            # training loader would change every later epoch's minibatches.
            scores = presample_counts(new_loader(), num_nodes)[candidates]
        chosen = select_cached_nodes(candidates, scores, cache_capacity(config.cache_fraction, num_nodes))
    return FeatureCache(g.ndata[feat_key], owner_lookup(book), own, chosen, num_nodes)


def _measurements(history: list[dict[str, Any]], start_epoch: int, config: TrainConfig, cache: FeatureCache,
                  cached_rows: list[int]) -> dict[str, Any]:
    """Per epoch (this run's epochs), one value per trainer: the stage breakdown,
    feature rows and bytes, cache hits and misses, sampled and remote neighbours."""
    epochs = [h for h in history if h["epoch"] >= start_epoch]
    keys = ("steps", "step_seconds", "local_rows", "remote_rows", "remote_bytes", "cache_hits",
            "sampled_neighbours", "remote_neighbours", "trainer_remote_neighbours")
    per_epoch = {k: [h[k] for h in epochs] for k in keys}
    per_epoch["stage_seconds"] = {s: [h["stage_seconds"][s] for h in epochs] for s in STAGES}
    hits, misses = (sum(map(sum, per_epoch[k])) for k in ("cache_hits", "remote_rows"))
    sampled, crossing, remote = (sum(map(sum, per_epoch[k])) for k in
                                 ("sampled_neighbours", "remote_neighbours", "trainer_remote_neighbours"))
    counted = config.neighbour_stats  # else the counts are zeros, not measurements: no fractions
    return dict(
        per_epoch=per_epoch, remote_neighbour_fraction=crossing / max(1, sampled) if counted else None,
        trainer_remote_neighbour_fraction=remote / max(1, sampled) if counted else None,
        cache=dict(policy=config.cache_policy, fraction=config.cache_fraction, rows_per_trainer=cached_rows,
                   row_bytes=cache.row_bytes, fill_bytes_per_trainer=[r * cache.row_bytes for r in cached_rows],
                   hits=hits, misses=misses, hit_rate=hits / max(1, hits + misses),
                   mismatched_rows=sum(sum(h["cache_mismatched_rows"]) for h in epochs)))


@dataclass
class _Job:
    """What every run of one job shares: the graph, this rank's share of the nodes, the loaders, the cache."""

    partition: OpenedPartition
    g: Any
    book: Any
    feat_key: str
    label_key: str
    rank: int
    world: int
    train_nodes: int          # this rank's share of the training nodes, before truncation
    train_nids: torch.Tensor  # ... truncated to the smallest share of any rank
    num_classes: int
    sampler: Any
    eval_loaders: dict[str, Any]
    loader: Any               # the first run's training loader (made before the cache's presampling pass)
    cache: FeatureCache = field(repr=False, default=None)

    def new_train_loader(self, batch_size: int):
        return dgl.dataloading.DistNodeDataLoader(self.g, self.train_nids, self.sampler, batch_size=batch_size,
                                                  shuffle=True, drop_last=False)


def _open_job(part_config: str | Path | OpenedPartition, config: TrainConfig) -> _Job:
    """Setup: the DistGraph, node shares, loaders and feature cache of this trainer."""
    partition = open_partition(part_config, verify=False, node_data=False)
    g = dgl.distributed.DistGraph(partition.graph_name, part_config=str(partition.config_path))
    book = g.get_partition_book()
    emulation.verify(book.partid)  # each trainer on its own machine's partition
    feat_key, label_key = node_data_keys(list(g.ndata.keys()), config.feat_name, config.label_name)
    rank, world = (dist.get_rank(), dist.get_world_size()) if _distributed() else (0, 1)
    splits = {s: dgl.distributed.node_split(g.ndata[f"{s}_mask"], book, force_even=True)
              for s in ("train", "val", "test")}
    train_nodes = len(splits["train"])
    keep = int(_reduce([train_nodes], dist.ReduceOp.MIN)[0])
    eval_sampler = (dgl.dataloading.MultiLayerFullNeighborSampler(len(config.fanouts)) if config.eval_fanouts is None
                    else dgl.dataloading.NeighborSampler(config.eval_fanouts))
    job = _Job(partition=partition, g=g, book=book, feat_key=feat_key, label_key=label_key, rank=rank, world=world,
               train_nodes=train_nodes, train_nids=splits["train"][:keep],
               num_classes=_num_classes(g, partition.config, label_key),
               sampler=dgl.dataloading.NeighborSampler(config.fanouts),
               eval_loaders={s: dgl.dataloading.DistNodeDataLoader(g, splits[s], eval_sampler,
                                                                   batch_size=config.eval_batch_size)
                             for s in ("val", "test")},
               loader=None)
    job.loader = job.new_train_loader(config.batch_size)
    if config.repeatable_sampling and _distributed():
        check_repeatable(partition.num_parts, world // partition.num_parts,
                         dgl.distributed.rpc.get_num_server_per_machine(), int(os.environ.get("DGL_NUM_SAMPLER", "0")))
        seed_remote_servers(config.seed * 7919, book.partid, partition.num_parts)
    job.cache = _feature_cache(g, book, feat_key, lambda: job.new_train_loader(config.batch_size), config, rank)
    return job


def _train_epoch(job: _Job, model, optimizer, loader, config: TrainConfig, epoch: int, clock: StageClock,
                 first: bool = False) -> dict[str, Any]:
    """One epoch over this rank's minibatches, then evaluation; the epoch's row of the history (every rank's
    counts gathered, accuracies summed over ranks).  ``first``: the run's first epoch (or the resumed one)."""
    g, cache, rank, world = job.g, job.cache, job.rank, job.world
    parameters = list(model.parameters())
    epoch_seed = config.seed * 1_000_003 + epoch * 1009
    set_seed(epoch_seed + rank)
    if config.repeatable_sampling and _distributed():
        seed_remote_servers(epoch_seed, job.book.partid, job.partition.num_parts)
    model.train()
    start, steps, loss_sum, step_seconds, mismatched = time.perf_counter(), 0, 0.0, 0.0, 0
    neighbours = [0, 0, 0]  # sampled, on another machine than their sampler, than this trainer
    if config.verify_cache and first and len(cache):  # every cached row against the servers' row
        mismatched += int((~(cache.rows == g.ndata[job.feat_key][cache.cached]).all(dim=1)).sum())
    batches = iter(loader)

    def sample(step: int):
        with clock("sample"):
            if config.repeatable_sampling:
                seed_own_sampling(epoch_seed + rank, step)
            return next(batches, None)

    step_start = time.perf_counter()
    batch = sample(0)
    while batch is not None:
        input_nodes, seeds, blocks = batch
        with clock("fetch"):
            features = cache.fetch(input_nodes)
            labels = g.ndata[job.label_key][seeds].long()
        with clock("forward"):
            loss = F.cross_entropy(model(blocks, features), labels)
        with clock("backward"):
            optimizer.zero_grad()
            loss.backward()
        finish_allreduce = start_allreduce(parameters, world)
        batch = sample(steps + 1)  # while the gradients travel (stages.py)
        with clock("allreduce"):
            finish_allreduce()
        with clock("optimizer"):
            optimizer.step()
        loss_sum += float(loss)
        steps += 1
        step_seconds += time.perf_counter() - step_start
        if config.neighbour_stats:
            counted = count_remote_neighbours(blocks, cache.owner_of, job.book.partid)
            neighbours = [a + b for a, b in zip(neighbours, counted)]
        if config.verify_cache:  # after the step's clock: a second fetch of every row, from the servers
            mismatched += int((~(features == g.ndata[job.feat_key][input_nodes]).all(dim=1)).sum())
        step_start = time.perf_counter()
    seconds = time.perf_counter() - start
    stage_seconds, counts = clock.take(), cache.take_counts()
    model.eval()
    eval_counts = [c for s in ("val", "test") for c in _evaluate(model, g, job.eval_loaders[s], job.feat_key,
                                                                  job.label_key)]
    val_c, val_n, test_c, test_n = _reduce(eval_counts)
    ranks = RankEpoch(steps, counts["local_rows"], counts["misses"], seconds, loss_sum / max(1, steps), counts["hits"],
                      counts["remote_bytes"], step_seconds, *neighbours, mismatched, stage_seconds).gather()
    per_field = {f.name: [getattr(r, f.name) for r in ranks] for f in fields(RankEpoch) if f.name != "stage_seconds"}
    return dict(
        per_field, epoch=epoch, loss=sum(per_field["loss"]) / world, val_acc=val_c / max(1, val_n),
        test_acc=test_c / max(1, test_n), seconds=max(per_field["seconds"]),
        stage_seconds={s: [r.stage_seconds[s] for r in ranks] for s in STAGES})


def _train_run(job: _Job, config: TrainConfig, loader, run_index: int = 0) -> tuple[list[dict[str, Any]], int]:
    """One training run (a fresh model seeded with ``config.seed``, or the checkpoint's): its history and the
    epoch it started at.  Rank 0 logs each epoch, saves the checkpoint and injects the configured fault."""
    model = make_model(config, job.g.ndata[job.feat_key].shape[1], job.num_classes)
    # No DDP: its all-reduce overlaps the backward pass; an explicit one can be timed (stages.py).
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    history, start_epoch = [], 0
    run_identity = identity(config, job.world, job.partition)
    state = resume_state(config, job.world, job.partition)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        history, start_epoch = list(state["history"]), int(state["epoch"]) + 1
    elif config.resume_if_present and job.rank == 0:
        print(f"no checkpoint in {config.checkpoint_dir}: starting from epoch 0", flush=True)
    clock = StageClock()
    for epoch in range(start_epoch, config.epochs):
        history.append(_train_epoch(job, model, optimizer, loader, config, epoch, clock, first=epoch == start_epoch))
        if job.rank == 0:
            last = history[-1]
            print(format_epoch_line(epoch, last["loss"], last["val_acc"], last["test_acc"], last["seconds"],
                                    run=run_index), flush=True)
            if config.checkpoint_dir:
                save_checkpoint(config.checkpoint_dir, dict(
                    epoch=epoch, model=model.state_dict(), optimizer=optimizer.state_dict(), history=history,
                    identity=run_identity))
            if config.fail_after_epoch == epoch:
                os.kill(os.getpid(), signal.SIGKILL)  # fault injection: die as a crashed trainer would
    return history, start_epoch


def _summary(job: _Job, config: TrainConfig, history: list[dict[str, Any]], start_epoch: int) -> dict[str, Any]:
    """The result of one run: accuracies at the best epoch, time, steps, feature rows and the measurements."""
    best, world = best_epoch_row(history), job.world
    this_run = [h for h in history if h["epoch"] >= start_epoch]
    timed = [h["seconds"] for h in this_run]
    result = dict(
        mode="distributed" if _distributed() else "standalone", world_size=world, num_parts=job.partition.num_parts,
        graph_name=job.partition.graph_name, test_acc=best["test_acc"], val_acc=best["val_acc"],
        best_epoch=best["epoch"], final_test_acc=history[-1]["test_acc"], epochs_run=len(history),
        resumed_from_epoch=start_epoch, seconds_per_epoch=sum(timed) / max(1, len(timed)),
        steps_per_epoch=math.ceil(len(job.train_nids) / config.batch_size),
        steps_per_trainer=[sum(h["steps"][r] for h in this_run) for r in range(world)],
        train_nodes_per_trainer=[int(r[0]) for r in _gather([job.train_nodes])],
        feature_rows=dict(local=[sum(h["local_rows"][r] for h in this_run) for r in range(world)],
                          remote=[sum(h["remote_rows"][r] for h in this_run) for r in range(world)]),
        history=history)
    rows = result["feature_rows"]
    rows["remote_fraction"] = sum(rows["remote"]) / max(1, sum(rows["local"]) + sum(rows["remote"]))
    result.update(_measurements(history, start_epoch, config, job.cache,
                                [int(r[0]) for r in _gather([len(job.cache)])]))
    return result


def run(part_config: str | Path | OpenedPartition, config: TrainConfig) -> dict[str, Any]:
    """Train on an initialised DistDGL client (or standalone); return the result
    (every rank returns it; rank 0 also writes it to ``config.out``).  The config is
    read once, here (the launcher checked its files before this process started).

    With ``config.runs`` > 1 the job trains again with seeds ``seed + 1``, ... (a fresh model and loader
    each, the same servers, shares and cache): the result's history and measurements are the first run's,
    ``runs`` lists every run's accuracies and ``test_acc_mean`` is their mean."""
    if config.exercise_interfaces and not _distributed():   # refused before the graph is opened
        raise ValueError("exercise_interfaces needs a distributed job (servers and trainers), not standalone mode")
    job = _open_job(part_config, config)
    interfaces = exercise_all(job.g) if config.exercise_interfaces else None
    result, runs = {}, []
    for k in range(config.runs):
        run_config = replace(config, seed=config.seed + k)
        history, start_epoch = _train_run(job, run_config, job.loader if k == 0 else
                                          job.new_train_loader(config.batch_size), run_index=k)
        if k == 0:
            result = _summary(job, run_config, history, start_epoch)
        best = best_epoch_row(history)
        runs.append(dict(seed=run_config.seed, test_acc=best["test_acc"], val_acc=best["val_acc"],
                         best_epoch=best["epoch"], final_test_acc=history[-1]["test_acc"],
                         final_val_acc=history[-1]["val_acc"], final_loss=history[-1]["loss"],
                         seconds_per_epoch=sum(h["seconds"] for h in history) / len(history)))
    result.update(runs=runs, test_acc_per_seed=[r["test_acc"] for r in runs],
                  test_acc_mean=sum(r["test_acc"] for r in runs) / len(runs), config=config.to_dict())
    if interfaces is not None:
        result["interfaces"] = interfaces
    if job.rank == 0 and config.out:
        tmp = Path(config.out).with_suffix(".part")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, config.out)
    return result


_STANDALONE_READY = False


def train_standalone(part_config: str | Path | OpenedPartition, config: TrainConfig) -> dict[str, Any]:
    """Train in this process on a one-partition config, no servers (notebook debugging)."""
    global _STANDALONE_READY
    if _distributed():
        raise RuntimeError("DGL_DIST_MODE is set: this process is a distributed client, not standalone")
    partition = open_partition(part_config, verify=False, node_data=False)
    if partition.num_parts != 1:
        raise ValueError(f"standalone mode needs a one-partition config; {part_config} has {partition.num_parts}")
    if not _STANDALONE_READY:
        dgl.distributed.initialize("")  # standalone: no ip_config is read
        _STANDALONE_READY = True
    return run(partition, config)


SERVER_WAIT_S = 60.0  # a trainer waits at most this long for its host's servers, then leaves it to DGL's retry


def wait_for_local_servers(ip_config: str, servers_per_machine: int, timeout_s: float = SERVER_WAIT_S) -> bool:
    """Return once every server that ``ip_config`` places on this host listens (True), or after
    ``timeout_s`` (False).  The launcher starts trainers with their servers, so a trainer's imports
    overlap the servers' loading; but DGL's client retries a refused connection only every 3 s,
    and lost 3-6 s of each job here.  Reading this host's listening ports (``/proc/net/tcp``)
    lets it connect the moment they listen, without a probe connection a server would count as
    a client.  A config naming another host is left to DGL's retry (False at once).

    Example:
        >>> wait_for_local_servers("", 1)
        False
    """
    try:
        hosts = read_host_file(ip_config)
    except LaunchError:  # none, or not a config the launcher wrote: DGL reads it, and says what is wrong
        return False
    if any(not ipaddress.ip_address(ip).is_loopback for ip, _ in hosts):
        return False
    ports = {(port or DGL_SERVER_PORT) + i for _, port in hosts for i in range(servers_per_machine)}
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        listening = listening_ports()
        if listening is None:
            return False
        if ports <= listening:
            return True
        time.sleep(0.05)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="DistDGL node-classification trainer (run by the gnnbook launcher)")
    parser.add_argument("--part-config", required=True)
    parser.add_argument("--ip-config", default=None, help="default: $DGL_IP_CONFIG")
    TrainConfig.add_arguments(parser)
    args = parser.parse_args(argv)
    config = TrainConfig.from_args(args)
    # The launcher sends SIGUSR1 before it stops a hung job: the log shows where each thread was.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if os.environ.get("DGL_ROLE") == "server" and emulation.required():
        # A server serves the partition of its machine: server id // servers per machine.
        emulation.verify(int(os.environ["DGL_SERVER_ID"]) // int(os.environ.get("DGL_NUM_SERVER", "1")))
    else:
        emulation.verify()
    ip_config = args.ip_config or os.environ.get("DGL_IP_CONFIG", "")
    if _distributed() and os.environ.get("DGL_ROLE") != "server":
        wait_for_local_servers(ip_config, int(os.environ.get("DGL_NUM_SERVER", "1")))
    dgl.distributed.initialize(ip_config)  # a server stays here
    if _distributed():
        dist.init_process_group("gloo")
    run(args.part_config, config)
    # No barrier here: DGL's exit handler synchronises all clients, then stops the servers.
    return 0


def _main_or_clear_error() -> int:
    try:
        return main()
    except (emulation.EmulationError, ValueError) as err:  # bad input: one paragraph, not a traceback
        print(f"error: {err}", file=sys.stderr, flush=True)
        # os._exit: DGL's exit handler would wait for the other clients, which may never come.
        os._exit(2)


if __name__ == "__main__":
    sys.exit(_main_or_clear_error())
