"""Benchmark: remote feature bytes per epoch of a real DistDGL job, with and without a feature cache.

The same job (2 emulated machines x 1 trainer, random partitions, GraphSAGE,
the same fanouts, batch size and seed) runs with ``cache_policy="none"`` and
with each cache policy at ``--fraction`` of the nodes per trainer
(:mod:`gnnbook.distributed.feature_cache`).  Printed per policy: remote bytes
per epoch (all trainers), the ratio cached / uncached, the hit rate, and the
bytes each trainer fetched once to fill its cache.  The ratio is about
1 - hit rate: the cache does not change which rows a minibatch needs, only
where they come from.

Run:
    python benchmarks/bench_dist_cache.py                       # amazon-photo, 10% cache
    python benchmarks/bench_dist_cache.py --dataset powerlaw --num-nodes 50000 --batch-size 64
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path


def remote_bytes_per_epoch(result: dict) -> list[int]:
    """Bytes fetched from other machines' servers in each epoch, summed over trainers."""
    return [sum(epoch) for epoch in result["per_epoch"]["remote_bytes"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="amazon-photo")
    parser.add_argument("--num-nodes", type=int, default=20_000, help="for synthetic datasets")
    parser.add_argument("--method", choices=("random", "metis"), default="random")
    parser.add_argument("--fraction", type=float, default=0.1, help="cache capacity per trainer, share of all nodes")
    parser.add_argument("--batch-size", type=int, default=16, help="per trainer")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    from gnnbook.distributed import LocalCluster, TrainConfig
    from gnnbook.distributed.partition_cache import partition_dataset

    options = {"num_nodes": args.num_nodes} if args.dataset in ("powerlaw", "sbm") else {}
    report = dict(dataset=args.dataset, method=args.method, fraction=args.fraction, batch_size=args.batch_size,
                  load_average=os.getloadavg(), cpus=os.cpu_count())
    with tempfile.TemporaryDirectory() as tmp:
        part_config = partition_dataset(args.dataset, 2, args.method, Path(tmp) / "p2", **options)
        with LocalCluster(part_config, num_trainers=1, deadline_s=900, workdir=Path(tmp) / "jobs") as cluster:
            results = {policy: cluster.train(TrainConfig(epochs=args.epochs, batch_size=args.batch_size,
                                                         eval_batch_size=4096, cache_policy=policy,
                                                         cache_fraction=args.fraction))
                       for policy in ("none", "degree", "presample")}
    plain = remote_bytes_per_epoch(results["none"])
    print(f"{args.dataset}, 2 machines x 1 trainer, {args.method} partitions: remote bytes per epoch without a cache "
          f"{[round(b / 1e6, 2) for b in plain]} MB")
    for policy in ("degree", "presample"):
        cached = remote_bytes_per_epoch(results[policy])
        cache = results[policy]["cache"]
        ratio = statistics.mean(cached) / statistics.mean(plain)
        report[policy] = dict(remote_bytes_per_epoch=cached, ratio=ratio, hit_rate=cache["hit_rate"],
                              fill_bytes_per_trainer=cache["fill_bytes_per_trainer"],
                              rows_per_trainer=cache["rows_per_trainer"], test_acc=results[policy]["test_acc"])
        print(f"{policy:>9} cache {100 * args.fraction:g}%: remote bytes per epoch "
              f"{[round(b / 1e6, 2) for b in cached]} MB, "
              f"ratio cached / uncached {ratio:.3f} (hit rate {100 * cache['hit_rate']:.1f}%; filled once with "
              f"{cache['fill_bytes_per_trainer'][0] / 1e6:.2f} MB per trainer)")
    report["none"] = dict(remote_bytes_per_epoch=plain, test_acc=results["none"]["test_acc"])
    report["load_average_after"] = os.getloadavg()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
