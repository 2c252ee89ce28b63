"""Recommendation on MovieLens: the sharded-embedding job's epoch time relative to one process, the
LightGCN/MF epoch-time ratio, and (``--sweep``) the validation sweep that picks lab 10's learning
rates and L2 penalties per model.

    python benchmarks/bench_recsys.py [--epochs 5] [--dim 32] [--sweep]
"""
import argparse
import time

import torch

from gnnbook.data import load_ratings
from gnnbook.applications.sharded_embedding import train_sharded_mf, train_single_mf
from gnnbook.applications.recsys import LightGCNRanker, MatrixFactorisation, fit_ranker, split_interactions
from gnnbook.training.train import Optim

SWEEP = {"MF": [(0.01, 1e-3), (0.02, 1e-3), (0.01, 1e-2), (0.02, 1e-2), (0.05, 1e-2)],
         "LightGCN": [(0.02, 1e-3), (0.05, 1e-3), (0.1, 1e-4), (0.05, 1e-4)]}


def _model(name, split, dim):
    return MatrixFactorisation(split, dim) if name == "MF" else LightGCNRanker(split, dim, 3)


def sweep(split, dim: int, epochs: int) -> None:
    print(f"validation sweep, {epochs} epochs, batch 8192, dim {dim} (seed 0)")
    print(f"{'model':<10}{'lr':>7}{'l2':>8}{'val recall@20':>15}{'best epoch':>12}{'s':>7}")
    for name, grid in SWEEP.items():
        for lr, l2 in grid:
            torch.manual_seed(0)
            start = time.perf_counter()
            run = fit_ranker(_model(name, split, dim), split, Optim(lr=lr, epochs=epochs), 8192, l2=l2, eval_every=2)
            print(f"{name:<10}{lr:>7}{l2:>8}{run['val']['recall']:>15.4f}{run['best_epoch']:>12}"
                  f"{time.perf_counter() - start:>7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--sweep", action="store_true", help="also run the learning-rate / L2 sweep (slow)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    split = split_interactions(load_ratings("ml-latest-small"), seed=0)
    options = dict(dim=args.dim, epochs=args.epochs, batch_size=4096, lr=0.02, l2=1e-2, seed=0)
    single = train_single_mf(split, **options)
    sharded = train_sharded_mf(split, **options)
    one, two = sum(single["epoch_s"][1:]), sum(sharded["epoch_s"][1:])  # the first epoch warms up
    print(f"MF with sparse Adam, {args.epochs} epochs (first not timed), dim {args.dim}:")
    print(f"  one process {one / (args.epochs - 1):.3f} s/epoch; DistEmbedding on 2 emulated machines "
          f"{two / (args.epochs - 1):.3f} s/epoch; ratio {two / one:.2f}x "
          f"({sharded['remote_share']:.0%} of rows remote)")
    times = {}
    for name in ("MF", "LightGCN"):
        torch.manual_seed(0)
        start = time.perf_counter()
        fit_ranker(_model(name, split, 64), split, Optim(lr=0.02, epochs=2), 8192, eval_every=2)
        times[name] = (time.perf_counter() - start) / 2
    print(f"BPR epoch (batch 8192, dim 64, with one evaluation): MF {times['MF']:.2f} s, LightGCN "
          f"{times['LightGCN']:.2f} s, ratio {times['LightGCN'] / times['MF']:.2f}x")
    if args.sweep:
        sweep(split, 64, 12)


if __name__ == "__main__":
    main()
