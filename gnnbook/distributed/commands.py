"""Command-line subcommands of the distributed trainer, registered by
``gnnbook.cli`` with :func:`register`:

- ``partition``: partition a dataset (or read a partition back) and print
  edge cut, replication and balance;
- ``dist-train``: partition into the cache when needed, run the distributed
  trainer on a local emulated cluster (or a host file), and compare with
  single-process minibatch training;
- ``launch``: run any DistDGL script under the launcher (``--dry-run`` prints
  every command with its environment).

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
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from ..procs import ProcessFailed
from .config import TrainConfig
from .launcher import LaunchError
from .partition import METHODS, PartitionError


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

        try:
            return handler(args)
        except ProcessFailed as err:
            print(f"error: distributed job failed: {err}", file=sys.stderr)
            return 1
        except (PartitionError, LaunchError, DatasetError, ValueError, TypeError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return run


def _partition(args: argparse.Namespace) -> int:
    from .partition import load_partition, partition_dataset

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


def _cluster(args: argparse.Namespace, part_config: Path):
    from .cluster import Cluster, LocalCluster

    common = dict(num_trainers=args.num_trainers, num_servers=args.num_servers, num_samplers=args.num_samplers,
                  deadline_s=args.deadline)
    if args.workdir:
        common["workdir"] = args.workdir
    if args.hosts:
        return Cluster(part_config, args.hosts, **common)
    return LocalCluster(part_config, mode=args.mode, **common)


BASELINE_SEEDS = 5  # ~1 s each on Cora; seed-to-seed spread is ~0.5 point


def _dist_train(args: argparse.Namespace) -> int:
    from .baseline import train_single_process
    from .emulation import job_segments
    from .partition import cached_partition

    config = TrainConfig.from_args(args)
    if args.part_config:
        part_config = Path(args.part_config)
    else:
        if not args.dataset:
            raise LaunchError("dist-train needs --dataset NAME (partitioned into the cache) or --part-config FILE")
        part_config = cached_partition(args.dataset, args.num_parts, args.method, **_options(args.option))
    with _cluster(args, part_config) as cluster:
        if args.dry_run:
            print(cluster.dry_run(config))
            return 0
        result = cluster.train(config)
        tag = cluster.last_plan.job_tag
    result["part_config"] = str(part_config)
    result["shm_segments_left"] = [p.name for p in job_segments(tag)]
    if not args.no_baseline:
        # The same seed, plus four more: with Cora's 140 training nodes one run's
        # test accuracy moves by about a point with the seed, so the gap is taken
        # against the mean of BASELINE_SEEDS single-process runs.
        runs = [train_single_process(part_config, replace(config, seed=config.seed + k), num_trainers=result["world_size"])
                for k in range(BASELINE_SEEDS)]
        single = {k: v for k, v in runs[0].items() if k != "history"}
        single["test_acc_per_seed"] = [r["test_acc"] for r in runs]
        single["test_acc_mean"] = sum(single["test_acc_per_seed"]) / len(runs)
        result["single_process"] = single
        result["accuracy_gap"] = result["test_acc"] - single["test_acc_mean"]
    if not args.history:
        result.pop("history")
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{result['num_parts']} partitions x {args.num_trainers} trainers ({result['mode']}): test accuracy "
              f"{result['test_acc']:.3f} (best val epoch {result['best_epoch']}), {result['seconds_per_epoch']:.2f} s/epoch, "
              f"steps per trainer {result['steps_per_trainer']}, remote feature rows "
              f"{100 * result['feature_rows']['remote_fraction']:.1f}%, wall {result['wall_seconds']:.1f} s")
        if "single_process" in result:
            single = result["single_process"]
            print(f"single process, same model/fanouts/seed: test accuracy {single['test_acc']:.3f} "
                  f"(mean over seeds {config.seed}..{config.seed + BASELINE_SEEDS - 1}: {single['test_acc_mean']:.3f}), "
                  f"{single['seconds_per_epoch']:.2f} s/epoch")
    return 0


def _launch(args: argparse.Namespace) -> int:
    command = [c for c in args.script if c != "--"] if args.script else []
    if not command:
        raise LaunchError("launch needs the command to run after '--', e.g. -- python train.py --epochs 2")
    with _cluster(args, Path(args.part_config)) as cluster:
        if args.dry_run:
            from .launcher import render

            print(render(cluster.plan(command)))
            return 0
        codes = cluster.run(command)
    print(json.dumps(codes) if args.json else "\n".join(f"{k}: exit {v}" for k, v in codes.items()))
    return 0


def _add_job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-trainers", type=int, default=1, help="trainer processes per machine")
    parser.add_argument("--num-servers", type=int, default=1, help="graph servers per machine")
    parser.add_argument("--num-samplers", type=int, default=0, help="DGL sampler processes per trainer")
    parser.add_argument("--hosts", help="host file (one 'IP [PORT]' line per machine): run over ssh")
    parser.add_argument("--mode", choices=("local", "netns"), default="local",
                        help="local: emulated machines in this host (no root); netns: one network namespace each (root)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds before the whole job is stopped (default: dist-train from the epochs and "
                        "steps, launch 600)")
    parser.add_argument("--dry-run", action="store_true", help="print every command with its environment; run nothing")
    parser.add_argument("--workdir", help="folder for ip_config, logs and results (default: a temporary folder; "
                        "with --hosts: ./gnnbook-jobs, which must be on a file system every host shares)")
    parser.add_argument("--json", action="store_true")


def register(subparsers: Any) -> None:
    """Add ``partition``, ``dist-train`` and ``launch`` to an argparse subparsers object."""
    p = subparsers.add_parser("partition", help="partition a dataset for DistDGL and report cut / replication / balance")
    p.add_argument("--dataset")
    p.add_argument("--num-parts", type=int)
    p.add_argument("--method", choices=METHODS, default="metis")
    p.add_argument("--out", help="output folder (default: the partition cache)")
    p.add_argument("--option", action="append", default=[], help="synthetic dataset option KEY=VALUE")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--read", metavar="CONFIG", help="only read back an existing partition config")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_guard(_partition))

    p = subparsers.add_parser("dist-train", help="distributed DGL training (servers, trainers, partitions)")
    p.add_argument("--dataset")
    p.add_argument("--part-config", help="use this partition config instead of partitioning --dataset")
    p.add_argument("--num-parts", type=int, default=2)
    p.add_argument("--method", choices=METHODS, default="metis")
    p.add_argument("--option", action="append", default=[], help="synthetic dataset option KEY=VALUE")
    p.add_argument("--no-baseline", action="store_true", help="skip the single-process comparison")
    p.add_argument("--history", action="store_true", help="include per-epoch history in the JSON")
    _add_job_options(p)
    TrainConfig.add_arguments(p)
    p.set_defaults(func=_guard(_dist_train))

    p = subparsers.add_parser("launch", help="run any DistDGL script under the gnnbook launcher")
    p.add_argument("--part-config", required=True)
    _add_job_options(p)
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- python your_script.py args")
    p.set_defaults(func=_guard(_launch))
