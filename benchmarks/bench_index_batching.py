"""Index-batching against materialised snapshots on Los-loop: peak memory ratio and epoch time ratio.

For each (past, horizon), each loader is built and one epoch is run inside one
``PeakMemory`` block: first the data only (build + draw every batch), then
T-GCN training (build + one epoch of ``fit``).  Prints each loader's peak
memory and time and the ratios index / materialised (PGT-I reports up to 89%
less memory, i.e. a ratio of 0.11).

    python benchmarks/bench_index_batching.py [--windows 12x12 12x3] [--hidden 16] [--batch-size 64]
"""
import argparse
import functools
import time

import torch

from gnnbook.data import load_traffic
from gnnbook.base.memory import PeakMemory, exact_memory_available
from gnnbook.applications.temporal import TGCN, IndexDataset, SnapshotDataset, batch_order, fit, split_series


def _data_epoch(make, batch_size):
    with PeakMemory() as peak:
        start = time.perf_counter()
        data = make()
        for indices in batch_order(len(data), batch_size, epoch=0):
            data.batch(indices)
        seconds = time.perf_counter() - start
    return peak.peak_bytes, seconds


def _train_epoch(make, adjacency, hidden, horizon, batch_size):
    torch.manual_seed(0)
    model = TGCN(adjacency, hidden, horizon)
    with PeakMemory() as peak:
        start = time.perf_counter()
        fit(model, make(), 1, batch_size)
        seconds = time.perf_counter() - start
    return peak.peak_bytes, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", nargs="+", default=["12x12", "12x3"], help="past x horizon")
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--no-train", action="store_true", help="data epochs only (seconds instead of minutes)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    exact = exact_memory_available("nothing (the benchmark only prints)")
    traffic = load_traffic("los-loop")
    print(f"los-loop {traffic.num_steps} x {traffic.num_nodes}; exact memory: {exact}")
    for spec in args.windows:
        past, horizon = (int(v) for v in spec.split("x"))
        split = split_series(traffic.speed, past, horizon)
        window = (split.series, past, horizon, 0, split.train_stop)
        loaders = {"materialised": functools.partial(SnapshotDataset, *window),
                   "index": functools.partial(IndexDataset, *window)}
        runs = {"data": {k: _data_epoch(make, args.batch_size) for k, make in loaders.items()}}
        if not args.no_train:
            runs["train"] = {k: _train_epoch(make, traffic.adjacency, args.hidden, horizon, args.batch_size)
                             for k, make in loaders.items()}
        for what, r in runs.items():
            (m_bytes, m_s), (i_bytes, i_s) = r["materialised"], r["index"]
            print(f"past={past:>2} horizon={horizon:>2} {what:<5}  materialised {m_bytes / 2**20:7.2f} MiB "
                  f"{m_s:7.3f} s | index {i_bytes / 2**20:7.2f} MiB {i_s:7.3f} s | "
                  f"peak memory ratio {i_bytes / max(m_bytes, 1):.3f}, epoch time ratio {i_s / m_s:.2f}")


if __name__ == "__main__":
    main()
