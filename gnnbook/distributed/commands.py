"""Command-line subcommands of the distributed trainer, registered by
``gnnbook.cli`` with :func:`register`:

Book: 8.3 distributed training (its commands).

Used in: no notebook directly.

- ``partition``: partition a dataset (or read a partition back) and print
  edge cut, replication and balance;
- ``dist-train``: partition into the cache when needed, run the distributed
  trainer on a local emulated cluster (or a host file), and compare with
  single-process minibatch training;
- ``launch``: run any DistDGL script under the launcher (``--dry-run`` prints
  every command with its environment).  In the script's arguments
  ``{ip_config}``, ``{part_config}``, ``{graph_name}``, ``{num_parts}``,
  ``{num_trainers}``, ``{num_servers}``, ``{num_samplers}`` and ``{workdir}``
  become the job's values, so an unmodified DistDGL script that takes
  ``--ip_config PATH`` runs as it is (each process also has ``$DGL_IP_CONFIG``).

Each handler returns an exit code; known errors become one paragraph on
stderr and exit code 2.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(); register(parser.add_subparsers(dest="command"))
    >>> parser.parse_args(["partition", "--dataset", "cora", "--num-parts", "2"]).num_parts
    2
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from ..base.procs import ProcessFailed
from ..training.train import MINIBATCH_LR
from .config import CACHE_POLICIES, MODELS, TrainConfig
from .launcher import LaunchError
from .partition_files import METHODS, OpenedPartition, PartitionError


def _options(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs or []:
        key, _, value = pair.partition("=")
        if not key or not value:
            raise LaunchError(f"--option expects KEY=VALUE (e.g. num_nodes=20000), got {pair!r}")
        for cast in (int, float):
            try:
                value = cast(value)
                break
            except ValueError:
                pass
        out[key] = value
    return out


def _guard(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from ..data import DatasetError
        from .emulation import EmulationError

        try:
            return handler(args)
        except ProcessFailed as err:
            print(f"error: distributed job failed: {err}", file=sys.stderr)
            return 1
        except (PartitionError, LaunchError, DatasetError, EmulationError, ValueError, TypeError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return run


def _partition(args: argparse.Namespace) -> int:
    from .partition_files import load_partition
    from .partition_cache import partition_dataset

    if args.read:
        config = Path(args.read)
    else:
        if not args.dataset or not args.num_parts:
            raise LaunchError("partition needs --dataset NAME and --num-parts K (or --read CONFIG to read one back)")
        config = partition_dataset(args.dataset, args.num_parts, args.method, args.out, seed=args.seed,
                                   **_options(args.option))
    report = load_partition(config)
    print(json.dumps(report.to_dict(), indent=1) if args.json else f"partition config: {config}\n{report.table()}")
    return 0


def _cluster(args: argparse.Namespace, part_config: Path | OpenedPartition):
    from .cluster import Cluster, LocalCluster

    common = dict(num_trainers=args.num_trainers, num_servers=args.num_servers, num_samplers=args.num_samplers,
                  deadline_s=args.deadline, machine_memory=args.machine_memory)
    if args.workdir:
        common["workdir"] = args.workdir
    if args.hosts:
        return Cluster(part_config, args.hosts, **common)
    return LocalCluster(part_config, mode=args.mode, **common)


BASELINE_SEEDS = 5  # ~1 s each on Cora; seed-to-seed spread is ~0.5 point


def _dist_train(args: argparse.Namespace) -> int:
    from .baseline import train_single_process_seeds
    from .emulation import job_segments
    from .partition_files import open_partition
    from .partition_cache import open_cached_partition

    config = TrainConfig.from_args(args)
    # The partition is read and checked once, here; everything below takes the opened one.
    if args.part_config:
        partition = open_partition(args.part_config)
    else:
        if not args.dataset:
            raise LaunchError("dist-train needs --dataset NAME (partitioned into the cache) or --part-config FILE")
        partition = open_cached_partition(args.dataset, args.num_parts, args.method, **_options(args.option))
    part_config = partition.config_path
    _check_inputs(partition, config, args.num_trainers)
    with _cluster(args, partition) as cluster:
        if args.dry_run:
            print(cluster.dry_run(config))
            return 0
        # the epochs as a bar on a terminal's stderr (stdout stays the JSON result)
        result = cluster.train(config, progress=sys.stderr.isatty() and not args.no_progress)
        tag = cluster.last_plan.job_tag
    result["part_config"] = str(part_config)
    result["shm_segments_left"] = [p.name for p in job_segments(tag)]
    if not args.no_baseline:
        # The same seed, plus four more: with Cora's 140 training nodes one run's
        # test accuracy moves by about a point with the seed, so the gap is taken
        # against the mean of BASELINE_SEEDS single-process runs.
        runs = train_single_process_seeds(partition, config, BASELINE_SEEDS, num_trainers=result["world_size"])
        single = {k: v for k, v in runs[0].items() if k != "history"}
        single["test_acc_per_seed"] = [r["test_acc"] for r in runs]
        single["test_acc_mean"] = sum(single["test_acc_per_seed"]) / len(runs)
        result["single_process"] = single
        result["accuracy_gap"] = result["test_acc_mean"] - single["test_acc_mean"]  # the job's runs' mean
    if not args.history:
        result.pop("history")
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{result['num_parts']} partitions x {args.num_trainers} trainers ({result['mode']}): test accuracy "
              f"{result['test_acc']:.3f} (best val epoch {result['best_epoch']}"
              + (f"; mean of {len(result['runs'])} runs {result['test_acc_mean']:.3f}"
                 if len(result["runs"]) > 1 else "")
              + f"), {result['seconds_per_epoch']:.2f} s/epoch, "
              f"steps per trainer {result['steps_per_trainer']}, remote feature rows "
              f"{100 * result['feature_rows']['remote_fraction']:.1f}%, wall {result['wall_seconds']:.1f} s")
        stages = {s: sum(map(sum, v)) for s, v in result["per_epoch"]["stage_seconds"].items()}
        print("time per stage (all trainers and epochs): " + ", ".join(
            f"{s} {100 * t / max(1e-9, sum(stages.values())):.0f}%" for s, t in stages.items())
              + ("" if result["remote_neighbour_fraction"] is None else
                 f"; sampled neighbours on another machine {100 * result['remote_neighbour_fraction']:.1f}%"))
        cache = result["cache"]
        if cache["policy"] != "none":
            print(f"cache {cache['policy']} {cache['fraction']:g}: {cache['rows_per_trainer']} rows per trainer, "
                  f"hit rate {100 * cache['hit_rate']:.1f}% ({cache['hits']} hits, {cache['misses']} misses); remote "
                  f"bytes per epoch {[sum(e) for e in result['per_epoch']['remote_bytes']]}")
        for machine in result.get("machine_memory", []):
            print(_peak_line(machine))
        if "single_process" in result:
            single = result["single_process"]
            print(f"single process, same model/fanouts/seed: test accuracy {single['test_acc']:.3f} "
                  f"(mean over seeds {config.seed}..{config.seed + BASELINE_SEEDS - 1}: "
                  f"{single['test_acc_mean']:.3f}), "
                  f"{single['seconds_per_epoch']:.2f} s/epoch")
    return 0


def _check_inputs(partition: OpenedPartition, config: TrainConfig, num_trainers: int) -> None:
    """Refuse, before any process starts, what the trainers would refuse."""
    from .checkpoint import resume_state
    from .config import node_data_keys

    node_data_keys(list(partition.node_data_names or ()), config.feat_name, config.label_name)
    resume_state(config, partition.num_parts * num_trainers, partition)


def _launch(args: argparse.Namespace) -> int:
    from .launcher import render

    # Only the first '--' separates gnnbook's options from the command; the command keeps its own.
    command = args.script[1:] if args.script[:1] == ["--"] else list(args.script or [])
    if not command:
        raise LaunchError("launch needs the command to run after '--', e.g. -- python train.py --epochs 2")
    with _cluster(args, Path(args.part_config)) as cluster:
        if args.dry_run:
            print(render(cluster.plan(command)))
            return 0
        # The start path of dist-train: preflight, fresh ports on a clash, logs kept on failure.
        codes = cluster.run(command)
        # With --machine-memory, each machine's measured peak (benchmarks/bench_scale.py reads it).
        machines = [asdict(r) for r in cluster.started[-1].reports] if args.machine_memory else []
    if args.json:
        print(json.dumps(dict(exit_codes=codes, **({"machine_memory": machines} if machines else {}))))
    else:
        print("\n".join([*(f"{k}: exit {v}" for k, v in codes.items()), *map(_peak_line, machines)]))
    return 0


def _peak_line(machine: dict[str, Any]) -> str:
    return (f"{machine['name']}: peak {machine['peak_bytes'] / 2**20:.0f} MiB of its "
            f"{machine['limit_bytes'] / 2**20:.0f} MiB budget ({machine['mode']})")


def _add_job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-trainers", type=int, default=1, help="trainer processes per machine")
    parser.add_argument("--num-servers", type=int, default=1, help="graph servers per machine")
    parser.add_argument("--num-samplers", type=int, default=0, help="DGL sampler processes per trainer")
    parser.add_argument("--hosts", help="host file (one 'IP [PORT]' line per machine): run over ssh")
    parser.add_argument("--mode", choices=("local", "netns"), default="local",
                        help="local: emulated machines in this host (no root); "
                             "netns: one network namespace each (root)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds before the whole job is stopped (default: dist-train from the epochs and "
                        "steps, launch 600)")
    parser.add_argument("--machine-memory", metavar="SIZE", help="a hard memory budget for each emulated machine "
                        "(its servers, trainers and samplers together), e.g. 2GiB: a cgroup where one can be made "
                        "(root, or a delegated cgroup v2 subtree), else measured and checked afterwards; a machine "
                        "over it fails the job with its name and peak")
    parser.add_argument("--dry-run", action="store_true", help="print every command with its environment; run nothing")
    parser.add_argument("--workdir", help="folder for ip_config, logs and results (default: a temporary folder; "
                        "with --hosts: ./gnnbook-jobs, which must be on a file system every host shares)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


# Help for the options that TrainConfig.add_arguments makes from its fields (the comments in config.py).
TRAIN_HELP = {
    "model": "the model the trainers train (default: sage)",
    "input_dropout": "GraphSAGE: dropout on the input features as well (default); --no-input-dropout drops out "
                     "between layers only, as DGL's distributed GraphSAGE example does",
    "neighbour_stats": "count the sampled neighbours on another machine each step (default); "
                       "--no-neighbour-stats leaves that out (about 3-4%% of an epoch at 1M nodes)",
    "epochs": "passes over each trainer's training nodes (default: 20)",
    "batch_size": "seed nodes per minibatch, per trainer; the single-process baseline uses batch-size x trainers, "
                  "so both take the same number of steps (default: 4)",
    "eval_batch_size": "nodes per minibatch when evaluating (default: 256)",
    "eval_fanouts": "neighbours sampled per layer when evaluating, e.g. 25,25 (default: every neighbour; sample "
                    "on large power-law graphs, where a batch's full neighbourhood reaches the hubs)",
    "lr": "Adam's learning rate (default: " + ", ".join(f"{lr} for {m}" for m, lr in MINIBATCH_LR.items()) + ")",
    "weight_decay": "Adam's weight decay, an L2 penalty (default: 5e-4)",
    "hidden": "hidden width (default: the paper's, gnnbook.models.MODEL_DEFAULTS)",
    "seed": "seed of each trainer's model, minibatches and sampling (default: 0)",
    "runs": "train this many times in one job, with seeds --seed, --seed + 1, ... (the processes start once); "
            "the result gives each run's accuracy and their mean (default: 1)",
    "checkpoint_dir": "save a checkpoint here after every epoch",
    "resume": "continue from the checkpoint in --checkpoint-dir; an error if there is none or it was saved with "
              "other settings, world size or partition",
    "resume_if_present": "continue from the checkpoint in --checkpoint-dir if there is one, else start at epoch 0",
    "feat_name": "node data holding the features (default: 'feat' or 'features', whichever the partition has)",
    "label_name": "node data holding the labels (default: 'label' or 'labels', whichever the partition has)",
    "out": "file where trainer rank 0 writes the JSON result",
    "fail_after_epoch": "fault injection for the course: trainer rank 0 kills itself after this epoch",
    "cache_policy": f"each trainer's cache of remote feature rows, one of {', '.join(CACHE_POLICIES)}: filled once "
                    "from the servers, only misses are fetched (default: none)",
    "cache_fraction": "rows each trainer caches, as a share of all nodes, in (0, 1] (default: 0.1)",
    "verify_cache": "also fetch every row from the servers and count the cached rows that differ (tests)",
    "exercise_interfaces": "before training, every trainer tries DistGraph, DistTensor, DistEmbedding and the KV "
                           "store, and the result's 'interfaces' lists what each rank saw (book 8.3.2)",
    "repeatable_sampling": "seed the graph servers' sampling before every epoch, so that two jobs with the same "
                           "--seed draw the same neighbours (A/B comparisons; 2 machines x 1 trainer only)",
}


def _explain_train_options(parser: argparse.ArgumentParser) -> None:
    """Give the options of :meth:`TrainConfig.add_arguments` their help texts, and --model its choices."""
    for action in parser._actions:
        if action.dest in TRAIN_HELP and not action.help:
            action.help = TRAIN_HELP[action.dest]
        if action.dest == "model":
            action.choices = MODELS
        if action.dest == "cache_policy":  # checked by TrainConfig, whose error names the choices
            action.metavar = "{" + ",".join(CACHE_POLICIES) + "}"


def register(subparsers: Any) -> None:
    """Add ``partition``, ``dist-train`` and ``launch`` to an argparse subparsers object."""
    p = subparsers.add_parser("partition",
                              help="partition a dataset for DistDGL and report cut / replication / balance")
    from ..data import dataset_help

    p.add_argument("--dataset", help=dataset_help("the graph to partition"))
    p.add_argument("--num-parts", type=int, help="number of partitions (one per machine)")
    p.add_argument("--method", choices=METHODS, default="metis", help="metis: DGL's METIS (few cut edges); random: "
                   "each node to a random partition (default: metis)")
    p.add_argument("--out", help="output folder (default: the partition cache)")
    p.add_argument("--option", action="append", default=[], help="synthetic dataset option KEY=VALUE, repeatable "
                   "(e.g. --option num_nodes=20000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the partitioner (default: 0)")
    p.add_argument("--read", metavar="CONFIG", help="only read back an existing partition config")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_guard(_partition))

    p = subparsers.add_parser("dist-train", help="distributed DGL training (servers, trainers, partitions)")
    p.add_argument("--dataset", help=dataset_help("the graph to train on, partitioned into the cache when needed"))
    p.add_argument("--part-config", help="use this partition config instead of partitioning --dataset")
    p.add_argument("--num-parts", type=int, default=2, help="partitions, one per (emulated) machine (default: 2)")
    p.add_argument("--method", choices=METHODS, default="metis", help="how --dataset is partitioned (default: metis)")
    p.add_argument("--option", action="append", default=[], help="synthetic dataset option KEY=VALUE, repeatable")
    p.add_argument("--no-baseline", action="store_true", help="skip the single-process comparison")
    p.add_argument("--history", action="store_true", help="include per-epoch history in the JSON")
    p.add_argument("--no-progress", action="store_true",
                   help="no bar of the epochs on stderr (shown by default when stderr is a terminal)")
    _add_job_options(p)
    TrainConfig.add_arguments(p)
    _explain_train_options(p)
    p.set_defaults(func=_guard(_dist_train))

    p = subparsers.add_parser("launch", help="run any DistDGL script under the gnnbook launcher",
                              description="Run a DistDGL script on every machine.  In its arguments {ip_config}, "
                              "{part_config}, {graph_name}, {num_parts}, {num_trainers}, {num_servers}, "
                              "{num_samplers} and {workdir} become this job's values; every process also has "
                              "DGL_IP_CONFIG and DGL_CONF_PATH in its environment.")
    p.add_argument("--part-config", required=True, help="the partition config (JSON) of the graph the script trains on")
    _add_job_options(p)
    p.add_argument("script", nargs=argparse.REMAINDER,
                   help="-- python your_script.py --ip_config {ip_config} --part_config {part_config} ...")
    p.set_defaults(func=_guard(_launch))
