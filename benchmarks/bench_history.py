"""Historical embeddings (GNNAutoScale) against full-batch training and Cluster-GCN, per dataset: test
accuracy over seeds, training time per epoch and peak memory per step, each as a ratio to full-batch.

Every method trains the course's 2-layer GCN with :func:`gnnbook.ch5_minibatch.history.compare` and the
dataset's measured settings (:data:`gnnbook.ch5_minibatch.history.DATASET_SETTINGS`: epochs budget, early
stopping patience on validation accuracy, the minibatch arms' learning rate), keeps its best
validation epoch and is evaluated full-graph; GAS runs as its authors' benchmark does (history
filled before training, refreshed by every evaluation pass: ``refresh_on_eval``).  An epoch's time
is its training steps only (evaluation excluded), the median over seeds; the runs of one seed are
interleaved (full, GAS, Cluster-GCN), so drifting machine load hits every method.  Peak memory is
one training step measured alone (:func:`gnnbook.ch5_minibatch.history.step_memory`, the largest of 3).
No target is asserted here: chapter 05g asserts the accuracy and memory claims; on graphs that fit
in memory GAS does more, smaller steps and is expected to be slower per epoch.

    python benchmarks/bench_history.py [--datasets cora citeseer amazon-photo] [--seeds 3] [--threads 1]
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("DGLBACKEND", "pytorch")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gnnbook.data import load_dataset  # noqa: E402
from gnnbook.ch5_minibatch.history import LABELS, METHODS, Clusters, compare, dataset_settings, step_memory  # noqa: E402
from gnnbook.training.train import Optim  # noqa: E402


def measure(dataset: str, seeds: int, num_parts: int, clusters_per_batch: int) -> list[dict]:
    graph = load_dataset(dataset)
    settings = dataset_settings(dataset)
    results = compare(graph, seeds, minibatch_lr=settings["minibatch_lr"],
                      optim=Optim(epochs=settings["epochs"], patience=settings["patience"]),
                      clusters=Clusters(num_parts, clusters_per_batch), refresh_on_eval=True, track_staleness=False)
    memory = {m: step_memory(graph, m, num_parts, clusters_per_batch, steps=3)["peak_step_bytes"] for m in METHODS}
    rows = []
    for method in METHODS:
        rs = [r for r in results if r.method == method]
        acc = np.array([r.test_acc for r in rs])
        rows.append(dict(method=method, acc_mean=float(acc.mean()), acc_std=float(acc.std()),
                         epochs_run=float(np.mean([r.epochs_run for r in rs])),
                         best_epoch=float(np.mean([r.best_epoch for r in rs])),
                         seconds_per_epoch=statistics.median(r.seconds_per_epoch for r in rs),
                         peak_step_bytes=memory[method]))
    full = rows[0]
    for row in rows:
        row["time_ratio"] = row["seconds_per_epoch"] / full["seconds_per_epoch"]
        row["memory_ratio"] = row["peak_step_bytes"] / max(1, full["peak_step_bytes"])
    print(f"{dataset}: {len(rs)} seeds, {num_parts} METIS clusters, {clusters_per_batch} per batch, "
          f"settings {settings}")
    print(f"  {'method':<34} {'test acc (%)':>14} {'epochs':>7} {'best':>5} {'ms/epoch':>9} {'x full':>7} "
          f"{'step MB':>8} {'x full':>7}")
    for row in rows:
        print(f"  {LABELS[row['method']]:<34} {100 * row['acc_mean']:7.2f} ± {100 * row['acc_std']:4.2f} "
              f"{row['epochs_run']:7.0f} {row['best_epoch']:5.0f} {1000 * row['seconds_per_epoch']:9.1f} "
              f"{row['time_ratio']:7.2f} {row['peak_step_bytes'] / 1e6:8.1f} {row['memory_ratio']:7.2f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "amazon-photo"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--num-parts", type=int, default=40)
    parser.add_argument("--clusters-per-batch", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (chapter 05g runs on one)")
    args = parser.parse_args()
    for dataset in args.datasets:
        load_dataset(dataset)                # an unknown dataset fails (naming the known ones) before any training
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    for dataset in args.datasets:
        measure(dataset, args.seeds, args.num_parts, args.clusters_per_batch)
    print(f"ran in {time.perf_counter() - start:.0f} s; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
