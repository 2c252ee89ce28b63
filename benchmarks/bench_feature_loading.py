"""Feature-loading paths on sampled minibatches: pinned / pageable host time, and on a GPU all three paths.

For each batch size (seed nodes; DGL's neighbour sampler gives the input nodes) and feature
width, times the host work of the pageable path (gather into a fresh tensor, then the copy the
CUDA driver makes into its pinned buffer) and of the pinned path (gather into a reused buffer),
and prints the ratio pinned / pageable (below 1: the pinned path is faster).  With a CUDA
device it also times the three paths end to end onto the GPU and prints pinned / pageable and
zero-copy / pageable (Min et al., PVLDB 2021, report 65-92% faster multi-GPU training with
zero-copy).  The fastest of the timings is reported: other programs only add time.

    python benchmarks/bench_feature_loading.py [--dataset amazon-photo] [--batch-sizes 16 64 256] [--widths 16 256 1024]
"""
import argparse

import torch

from gnnbook.data import load_dataset
from gnnbook.ch5_minibatch.feature_loading import (input_node_batches, measure_device, measure_host_grid,
                                     zero_copy_engine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="amazon-photo")
    parser.add_argument("--fanouts", type=int, nargs="+", default=[10, 5])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--widths", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--batches", type=int, default=4, help="minibatches timed per size")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    graph = load_dataset(args.dataset)
    batches = {b: input_node_batches(graph, args.fanouts, b, args.batches) for b in args.batch_sizes}
    grid = measure_host_grid(batches, args.widths, graph.num_nodes(), args.repeats, args.rounds)
    engine = zero_copy_engine()
    print(f"{args.dataset}, fanouts {args.fanouts}; GPU: {f'yes, zero-copy by {engine}' if engine else 'no'}")
    print(f"{'seeds':>5} {'rows':>6} {'width':>5} {'MB':>7} {'pageable us':>11} {'pinned us':>9} "
          f"{'pinned/pageable':>15}"
          + ("   GPU: pinned/pageable  zero-copy/pageable" if engine else ""))
    for r in grid:
        line = (f"{r['batch_size']:5d} {r['rows']:6.0f} {r['width']:5d} {r['bytes'] / 1e6:7.2f} "
                f"{r['pageable'] * 1e6:11.1f} {r['pinned'] * 1e6:9.1f} {r['pinned'] / r['pageable']:15.2f}")
        if engine:
            table = torch.rand(graph.num_nodes(), r["width"])
            gpu = {p: min(t) for p, t in measure_device(table, batches[r["batch_size"]],
                                                       args.repeats * args.rounds).items()}
            line += f"   {gpu['pinned'] / gpu['pageable']:20.2f}  {gpu['zero-copy'] / gpu['pageable']:18.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
