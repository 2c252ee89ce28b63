"""Historical-embedding (GNNAutoScale) training time per epoch relative to full-batch, same graph.

Both sides train the course's 2-layer GCN for the same number of epochs (no early stop) with the
same optimiser; an epoch is the training steps only (GAS: every batch of METIS clusters once, with
its halo's history pull and its push; full-batch: one step on the whole graph), evaluation and
staleness measurement excluded.  Cluster-GCN (cut edges dropped, same batches) is printed too.
Prints the ratios GAS / full-batch and Cluster-GCN / full-batch; no target is asserted: on small
graphs that fit in memory GAS does more, smaller steps and is expected to be slower per epoch.

    python benchmarks/bench_history.py [--dataset cora] [--epochs 50] [--repeats 3] [--threads 1]
"""
import argparse
import os
import statistics

os.environ.setdefault("DGLBACKEND", "pytorch")

import torch  # noqa: E402

from gnnbook.data import load_dataset  # noqa: E402
from gnnbook.engine.history import build_setup, train  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="cora")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-parts", type=int, default=40)
    parser.add_argument("--clusters-per-batch", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (chapter 05g runs on one)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    graph = load_dataset(args.dataset)
    setup = build_setup(graph, args.num_parts, args.clusters_per_batch)
    options = dict(epochs=args.epochs, patience=args.epochs, num_parts=args.num_parts,
                   clusters_per_batch=args.clusters_per_batch, track_staleness=False)
    times = {"full": [], "gas": [], "cluster_gcn": []}
    for method in times:   # warm-up: allocator, kernels
        train(graph, method, **{**options, "epochs": 2, "patience": 2}, setup=None if method == "full" else setup)
    for _ in range(args.repeats):   # interleaved, so drifting machine load hits every side
        for method in times:
            result = train(graph, method, **options, setup=None if method == "full" else setup)
            assert result.epochs_run == args.epochs
            times[method].append(result.seconds_per_epoch)
    t = {method: statistics.median(v) for method, v in times.items()}
    print(f"{args.dataset}: per epoch  full-batch {1000 * t['full']:.2f} ms   GAS {1000 * t['gas']:.2f} ms   "
          f"Cluster-GCN {1000 * t['cluster_gcn']:.2f} ms  (median of {args.repeats} runs x {args.epochs} epochs, "
          f"{args.num_parts} clusters, {args.clusters_per_batch} per batch)")
    print(f"ratio GAS / full-batch = {t['gas'] / t['full']:.2f}   "
          f"ratio Cluster-GCN / full-batch = {t['cluster_gcn'] / t['full']:.2f}")


if __name__ == "__main__":
    main()
