"""Benchmark: the execution engine's ways of moving data, as ratios (no time is asserted).

Part 1, push / pull / hybrid (book 5.2.2, :mod:`gnnbook.ch5_minibatch.pushpull`): full-graph training of an
``L``-layer mean-aggregation GNN on ``K`` real processes (METIS partition).  Printed per ``K`` and mode:
bytes per epoch measured on the sockets and the best epoch time, each relative to the best of the
three modes, the remote rows recomputed and the modelled cost.  The epochs of the three modes are
taken in turn, so the machine's other load falls on all of them alike.  With ``--link-slowdown S`` the
cost model's link is S times slower and every dependency exchange waits for that link's wire time
(:mod:`gnnbook.comm.emulated_link`, a model of a link, the same one the plans were made for).

Part 2, P3 vs data parallelism (book 5.2.4, :mod:`gnnbook.ch5_minibatch.p3`): the bytes one minibatch step
moves, P3 / data parallel, for feature widths F in {16, 128, 1024}.

Run:
    python benchmarks/bench_engine.py                                # amazon-photo, K = 2 and 4, L = 2
    python benchmarks/bench_engine.py --dataset cora --layers 3 --link "100 GbE (RDMA)"
    python benchmarks/bench_engine.py --link-slowdown 100           # chapter 5c's timed link
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np


def pushpull_rows(results: list[dict], k: int, layers: int) -> list[dict]:
    """One row per mode from :func:`gnnbook.ch5_minibatch.pushpull.compare`'s per-rank results."""
    from gnnbook.ch5_minibatch.pushpull import MODES

    rows = []
    for mode in MODES:
        ranks = [r[mode] for r in results]
        epoch_s = np.max([r.epoch_s[1:] for r in ranks], axis=0)       # the slowest rank ends the epoch
        rows.append({"K": k, "L": layers, "mode": mode, "bytes": sum(r.dependency_wire[0] for r in ranks),
                     "epoch_ms": 1e3 * float(epoch_s.min()), "epoch_ms_median": 1e3 * float(np.median(epoch_s)),
                     "redundant_rows": sum(sum(r.redundant_rows) for r in ranks),
                     "modelled_ms": 1e3 * sum(r.modelled[mode] for r in ranks)})
    best_bytes, best_time = min(r["bytes"] for r in rows), min(r["epoch_ms"] for r in rows)
    for row in rows:
        row["bytes / best"] = row["bytes"] / best_bytes
        row["time / best"] = row["epoch_ms"] / best_time
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="amazon-photo")
    parser.add_argument("--machines", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--feature-width", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--link", default="10 GbE (TCP)",
                        help="the hybrid's cost model link (gnnbook.comm.collectives.LINKS)")
    parser.add_argument("--link-slowdown", type=float, default=None,
                        help="emulate the link this many times slower in the timed epochs (and plan for it)")
    parser.add_argument("--epochs", type=int, default=8, help="timed epochs per mode, after the measured one")
    parser.add_argument("--p3-widths", type=int, nargs="+", default=[16, 128, 1024])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args()

    import pandas as pd

    from gnnbook.base.launch import run, run_sequence

    rows = []
    for k in args.machines:
        results = run("gnnbook.ch5_minibatch.pushpull:compare", k,
                      {"dataset": args.dataset, "feature_width": args.feature_width, "hidden": args.hidden,
                       "layers": args.layers, "epochs": 1 + args.epochs, "link": args.link,
                       "link_slowdown": args.link_slowdown or 1.0, "emulate_link": args.link_slowdown is not None},
                      deadline_s=900)
        rows += pushpull_rows(results, k, args.layers)
    print(f"push / pull / hybrid: {args.dataset}, L={args.layers}, F={args.feature_width}, H={args.hidden}, "
          f"link {args.link!r}" + (f" x{args.link_slowdown:g} slower, emulated" if args.link_slowdown else "")
          + f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    table = pd.DataFrame(rows)
    print(table.round(3).to_string(index=False))

    jobs = [("gnnbook.ch5_minibatch.p3:step", {"mode": mode, "dataset": args.dataset, "feature_width": f,
                                        "batch_size": args.batch_size, "hidden": args.hidden})
            for f in args.p3_widths for mode in ("p3", "data_parallel")]
    steps = run_sequence(jobs, 2, deadline_s=900)
    moved = {}
    for (_, job), ranks in zip(jobs, steps):
        phase = sum(r.phase_wire[0] for r in ranks)
        grads = sum(r.gradient_wire[0] for r in ranks)
        moved[(job["feature_width"], job["mode"])] = (phase, phase + grads)
    p3_rows = [{"F": f, "p3 bytes": moved[(f, "p3")][0], "data parallel bytes": moved[(f, "data_parallel")][0],
                "p3 / data parallel": moved[(f, "p3")][0] / moved[(f, "data_parallel")][0],
                "with gradients: p3 / data parallel": moved[(f, "p3")][1] / moved[(f, "data_parallel")][1]}
               for f in args.p3_widths]
    print(f"\nP3 vs data parallel: {args.dataset}, K=2, one minibatch of {args.batch_size} per machine, "
          f"H={args.hidden}")
    print(pd.DataFrame(p3_rows).round(3).to_string(index=False))
    if args.json:
        print(json.dumps({"pushpull": rows, "p3": p3_rows}))


if __name__ == "__main__":
    main()
