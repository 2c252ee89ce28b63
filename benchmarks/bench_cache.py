"""Feature-cache hit rate of each policy as a fraction of Belady's offline optimum.

A seeded power-law graph (default 200,000 nodes); one trainer's share of the
training nodes (``--seeds``) sampled by DGL's neighbour sampler for
``--epochs`` epochs is the access trace; the pre-sampling policy counts one
more epoch with another seed.  For caches of 5%, 10% and 20% of the nodes,
prints each policy's hit rate and its ratio to Belady's (Belady = 1.00, the
bound no cache can pass), plus the time each simulation took.

    python benchmarks/bench_cache.py [--num-nodes 200000] [--seeds 20000] [--epochs 2]
"""
import argparse
import os
import time

os.environ.setdefault("DGLBACKEND", "pytorch")

import torch  # noqa: E402

from gnnbook.ch5_minibatch import caching as cache  # noqa: E402
from gnnbook.data import load_dataset  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-nodes", type=int, default=200_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--seeds", type=int, default=20_000, help="training nodes of the trainer")
    parser.add_argument("--fanouts", type=int, nargs="+", default=[10, 10])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=2, help="measured epochs (the trace)")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    args = parser.parse_args()
    for fraction in args.fractions:
        cache.check_fraction(fraction)

    graph = load_dataset("powerlaw", num_nodes=args.num_nodes, avg_degree=args.avg_degree, seed=0)
    n = graph.num_nodes()
    train = graph.ndata["train_mask"].nonzero().squeeze(1)
    seeds = train[torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:args.seeds]]
    start = time.perf_counter()
    trace, presample = cache.trace_and_presample(graph, seeds, args.fanouts, args.batch_size, args.epochs, seed=0)
    print(f"power-law graph: {n} nodes, {graph.num_edges()} edges; trace of {len(seeds)} seeds x {args.epochs} "
          f"epochs, fanouts {args.fanouts}, batch {args.batch_size}: {len(trace)} accesses, "
          f"{len(set(trace.tolist()))} distinct rows ({time.perf_counter() - start:.1f} s to sample)")
    degrees = cache.graph_degrees(graph)
    policies = [p for p in cache.POLICIES if p != "belady"]
    print(f"{'capacity':>9} {'policy':>10} {'hit rate':>9} {'/ Belady':>9} {'seconds':>8}")
    for fraction in args.fractions:
        capacity = cache.capacity_for(fraction, n)
        tic = time.perf_counter()
        best = cache.simulate(trace, "belady", capacity, n)["hit_rate"]
        print(f"{fraction:>9.0%} {'belady':>10} {best:>9.3f} {1:>9.2f} {time.perf_counter() - tic:>8.2f}")
        rates = {}
        for policy in policies:
            tic = time.perf_counter()
            rates[policy] = cache.simulate(trace, policy, capacity, n, degrees=degrees,
                                           presample_counts=presample)["hit_rate"]
            print(f"{'':>9} {policy:>10} {rates[policy]:>9.3f} {rates[policy] / best:>9.2f} "
                  f"{time.perf_counter() - tic:>8.2f}")
        print(f"{'':>9} presample / oracle = {rates['presample'] / rates['oracle']:.2f} (target >= 0.9), "
              f"presample - degree = {100 * (rates['presample'] - rates['degree']):+.1f} points (target >= -1)")


if __name__ == "__main__":
    main()
