"""Benchmark: the partitioners of book 6.2.1 on a graph of at least 1,000,000 edges, as ratios to pymetis.

Each partitioner of :mod:`gnnbook.ch6_fullgraph.partitioners` (random, the streaming LDG and Fennel written in plain
Python/NumPy, DGL's METIS and pymetis) splits a seeded power-law graph into ``K`` parts.  Printed per
method: wall-clock seconds and that time as a ratio of pymetis's, with the edge cut, the replication
factor and the vertex balance beside it, so the price of a better cut is read in one line.  Nothing
is asserted: the times belong to this machine.

Run:
    python benchmarks/bench_partition.py                        # 120k nodes, ~1M undirected edges, K = 4
    python benchmarks/bench_partition.py --nodes 500000 --parts 8
"""
from __future__ import annotations

import argparse

from gnnbook.data import load_dataset
from gnnbook.ch6_fullgraph.partitioners import METHODS, compare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=120_000)
    parser.add_argument("--avg-degree", type=int, default=20)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    graph = load_dataset("powerlaw", num_nodes=args.nodes, avg_degree=args.avg_degree, seed=args.seed)
    print(f"power-law graph: {graph.num_nodes():,} nodes, {graph.num_edges():,} edges (both directions), "
          f"K = {args.parts}")
    rows = {r["method"]: r for r in compare(graph, args.parts, METHODS, seed=args.seed)}
    reference = rows["pymetis"]["seconds"]
    print(f"{'method':<8} {'seconds':>8} {'/ pymetis':>10} {'edge cut':>9} {'replication':>12} {'balance':>8}")
    for method, r in rows.items():
        print(f"{method:<8} {r['seconds']:8.2f} {r['seconds'] / reference:10.2f} {r['edge_cut']:9.3f} "
              f"{r['replication_factor']:12.3f} {r['vertex_balance']:8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
