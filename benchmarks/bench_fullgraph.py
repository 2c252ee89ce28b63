"""Benchmark: full-graph distributed GCN training, subgraph vs operator parallelism, as ratios (no time is asserted).

For every ``K`` a two-layer GCN trains ``1 + epochs`` full-graph epochs on ``K`` real processes
(book 6.1.3): subgraph parallelism with halo exchange (:mod:`gnnbook.ch6_fullgraph.subgraph`) under
each partitioner, and CAGNET's operator parallelism (:mod:`gnnbook.ch6_fullgraph.spmm`) 1D, and 2D
when ``K`` is a square.  Printed per run: bytes per epoch measured on the sockets (summed over
processes, the layers' communication only), the slowest process's median epoch after the first,
its communication share, and both relative to subgraph parallelism under METIS.  The machine's
other load falls on all runs; read the times as a shape, not as values.

Run:
    python benchmarks/bench_fullgraph.py                       # amazon-photo, K = 2 and 4
    python benchmarks/bench_fullgraph.py --dataset cora --machines 4 9 --epochs 10
"""
from __future__ import annotations

import argparse
import json
import math
import os

import numpy as np


def row(method: str, k: int, partitioner: str, ranks: list) -> dict:
    """One printed row from the per-rank results of one training."""
    comm_key = "halo_s" if method == "subgraph" else "comm_s"
    wire = [r.halo_bytes_sent if method == "subgraph" else r.epoch_wire_sent for r in ranks]
    epoch = np.max([[sum(t.values()) for t in r.timeline[1:]] for r in ranks], axis=0)
    comm = np.max([[t[comm_key] + t["allreduce_s"] for t in r.timeline[1:]] for r in ranks], axis=0)
    return {"method": method, "K": k, "partitioner": partitioner, "bytes": sum(w[0] for w in wire),
            "epoch_ms": 1e3 * float(np.median(epoch)), "comm_share": float(np.median(comm / epoch))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="amazon-photo")
    parser.add_argument("--machines", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--partitioners", nargs="+", default=["random", "metis"])
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=6, help="timed epochs, after the first")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args()

    import pandas as pd

    from gnnbook.base.launch import run_sequence

    rows = []
    common = dict(dataset=args.dataset, epochs=1 + args.epochs, hidden=args.hidden)
    for k in args.machines:
        jobs, names = [], []
        for p in args.partitioners:
            jobs.append(("gnnbook.ch6_fullgraph.subgraph:train", dict(model="gcn", partitioner=p, **common)))
            names.append(("subgraph", p))
            for mode in ("1d", "2d"):
                if mode == "1d" or math.isqrt(k) ** 2 == k:
                    jobs.append(("gnnbook.ch6_fullgraph.spmm:train", dict(mode=mode, ordering=p, **common)))
                    names.append((mode, p))
        for (method, p), ranks in zip(names, run_sequence(jobs, k, deadline_s=900)):
            rows.append(row(method, k, p, ranks))
    table = pd.DataFrame(rows)
    for k in args.machines:
        base = table[(table.K == k) & (table.method == "subgraph") & (table.partitioner == "metis")]
        if len(base):
            table.loc[table.K == k, "bytes / subgraph-metis"] = table.bytes / float(base.bytes.iloc[0])
            table.loc[table.K == k, "time / subgraph-metis"] = table.epoch_ms / float(base.epoch_ms.iloc[0])
    print(f"full-graph GCN on {args.dataset}, H={args.hidden}, {args.epochs} timed epochs; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(table.round(3).to_string(index=False))
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
