"""A graph bigger than one machine's memory budget, trained on 2, 3 and 4 emulated machines.

Builds the seeded ``scale`` graph (default 2,000,000 nodes, about 1.1 GiB of structure and
features; its size is printed first), partitions it with METIS and at random (cached), and
trains it for one epoch on 1 to 4 emulated machines, a server and a trainer each, every
machine under the same hard memory budget (a cgroup; without one, peaks are measured and not
enforced, and the table says so).  Prints, per run, the size of each machine's partition files
(what its server loads, halo included), each machine's measured peak, and whether it trained or which machine
went over its budget.  The machines share this host's cores: time per epoch does not fall here.

    make scale                                     # the defaults below
    python benchmarks/scale_table.py --num-nodes 4000000 --machine-memory 4GiB --machines 1 2 4
"""
import argparse
import os
import time

os.environ.setdefault("DGLBACKEND", "pytorch")

from gnnbook.distributed.scale_runs import machine_runs, table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-nodes", type=int, default=2_000_000)
    parser.add_argument("--avg-degree", type=float, default=20.0)
    parser.add_argument("--num-features", type=int, default=64)
    parser.add_argument("--machine-memory", default="2.5GiB", help="each emulated machine's budget (e.g. 3GiB)")
    parser.add_argument("--machines", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--methods", nargs="+", default=["metis", "random"], choices=["metis", "random"])
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = machine_runs(dict(num_nodes=args.num_nodes, avg_degree=args.avg_degree, num_features=args.num_features),
                        args.machines, args.methods, args.machine_memory, epochs=args.epochs)
    print(table(rows))
    print(f"({time.perf_counter() - start:.0f} s in all, partitions cached for the next run)")


if __name__ == "__main__":
    main()
