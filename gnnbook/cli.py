"""The course's command line: ``python -m gnnbook <command>``.

Book: none (the command line over every layer).

Used in: no notebook directly.

Commands: ``env`` (check the pinned versions), ``datasets`` (table of the
shipped datasets), ``train`` (full-graph training over several seeds), plus the
distributed ones that ``gnnbook.distributed.commands`` registers and the
teachers' ones of ``gnnbook.course.commands``.

Example:
    $ python -m gnnbook train --dataset cora --model gcn --seeds 5 --json
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from .base.errors import UserError


def _env(args: argparse.Namespace) -> int:
    from .base.env import report

    table, problems = report()
    print(table)
    if problems:
        print("\nThe environment does not match the course's pins:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem.message()}", file=sys.stderr)
        print("Fix: recreate the environment with `make venv` (or `pip install -r requirements.lock` then "
              "`pip install --no-deps -e .` in a fresh Python 3.11 virtual environment).", file=sys.stderr)
        return 1
    print("\nAll pins satisfied.")
    return 0


def _datasets(args: argparse.Namespace) -> int:
    from .data import DATASETS, RATINGS_DATASETS, TRAFFIC_DATASETS, load_arrays, load_ratings, load_traffic

    if args.markdown:
        print(datasets_markdown())
        return 0
    if args.fetch:
        return _fetch(offline=args.offline)
    rows = []
    for name, spec in DATASETS.items():
        a = load_arrays(name, download=not args.offline)
        rows.append(dict(dataset=name, nodes=a.num_nodes, edges=a.num_edges // 2, features=a.feat.shape[1],
                         classes=int(a.label.max()) + 1,
                         split=f"{a.train_mask.sum()}/{a.val_mask.sum()}/{a.test_mask.sum()}"))
    traffic = []
    for name in TRAFFIC_DATASETS:
        t = load_traffic(name, download=not args.offline)
        traffic.append(dict(dataset=name, steps=t.num_steps, nodes=t.num_nodes, edges=t.num_edges))
    ratings = []
    for name in RATINGS_DATASETS:
        r = load_ratings(name, download=not args.offline)
        ratings.append(dict(dataset=name, users=r.num_users, items=r.num_items, ratings=r.num_ratings))
    if args.json:
        print(json.dumps(rows + traffic + ratings, indent=2, default=int))
        return 0
    header = f"{'dataset':<18}{'nodes':>8}{'edges':>9}{'features':>10}{'classes':>9}  train/val/test"
    print(header + "\n" + "-" * len(header))
    for r in rows:
        print(f"{r['dataset']:<18}{r['nodes']:>8}{r['edges']:>9}{r['features']:>10}{r['classes']:>9}  {r['split']}")
    print("\nEdges are undirected (each is stored in both directions). Synthetic graphs, no files "
          "needed: powerlaw, sbm, and scale (millions of nodes: gnnbook.data.scale_arrays).")
    header = f"\n{'traffic series':<18}{'steps':>8}{'nodes':>8}{'edges':>9}  (gnnbook.data.load_traffic)"
    print(header + "\n" + "-" * (len(header) - 1))
    for r in traffic:
        print(f"{r['dataset']:<18}{r['steps']:>8}{r['nodes']:>8}{r['edges']:>9}")
    header = f"\n{'ratings':<18}{'users':>8}{'items':>8}{'ratings':>9}  (gnnbook.data.load_ratings)"
    print(header + "\n" + "-" * (len(header) - 1))
    for r in ratings:
        print(f"{r['dataset']:<18}{r['users']:>8}{r['items']:>8}{r['ratings']:>9}")
    return 0


def _fetch(offline: bool) -> int:
    """Every shipped dataset's raw files found or downloaded, and their SHA-256 checked now."""
    from .data import DATASETS, RATINGS_DATASETS, TRAFFIC_DATASETS
    from .data.files import cache_dir, fetch

    bad = []
    for name, spec in {**DATASETS, **TRAFFIC_DATASETS, **RATINGS_DATASETS}.items():
        rows = fetch(spec, download=not offline)
        bad += [path for _, path, ok in rows if not ok]
        folders = sorted({str(path.parent) for _, path, _ in rows})
        state = "ok" if all(ok for *_, ok in rows) else "CHECKSUM MISMATCH"
        print(f"{name:<18}{len(rows):>3} file(s)  SHA-256 {state:<18} {', '.join(folders)}")
    if bad:
        print("\nThese files are not the pinned versions: delete them and run this command again to download "
              "them:\n" + "\n".join(f"  {p}" for p in bad), file=sys.stderr)
        return 1
    print(f"\nEvery shipped dataset is present and verified; downloads go to {cache_dir()} "
          "($GNNBOOK_DATA_DIR or data/). Notebooks and tests now run offline.")
    return 0


def datasets_markdown() -> str:
    """The dataset table of ``data/README.md``, generated from the registry."""
    from .data import DATASETS, RATINGS_DATASETS, TRAFFIC_DATASETS
    from .data.registry import ORIGINAL_TERMS, REFERENCES

    every = {**DATASETS, **TRAFFIC_DATASETS, **RATINGS_DATASETS}
    lines = ["| dataset | raw file | SHA-256 | pinned URL |", "|---|---|---|---|"]
    for name, spec in every.items():
        for file, digest in spec.files.items():
            lines.append(f"| {name} | `{spec.folder}/{file}` | `{digest}` | {spec.url(file)} |")
    lines += ["", "| dataset | source @ commit | licence | shape |", "|---|---|---|---|"]
    lines += [f"| {n} | {s.source} | {s.licence} | {s.shape} |" for n, s in every.items()]
    lines += ["", "| dataset | original data and its terms | cite (references.bib) |", "|---|---|---|"]
    lines += [f"| {n} | {ORIGINAL_TERMS[n]} | {', '.join(REFERENCES[n])} |" for n in every]
    return "\n".join(lines)


def _train(args: argparse.Namespace) -> int:
    from .base.env import check_device
    from .data import load_dataset
    from .training.train import Optim, summarize, train_over_seeds

    if args.seeds < 1:
        raise UserError("--seeds must be at least 1.")
    check_device(args.device)  # before any work: PyPI's DGL is a CPU build
    graph = load_dataset(args.dataset)
    results = train_over_seeds(graph, args.model, args.seeds, Optim(epochs=args.epochs), progress=not args.no_progress,
                               device=args.device)
    summary = {"dataset": args.dataset, **summarize(results)}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{args.model} on {args.dataset}, {args.seeds} seed(s): test accuracy "
              f"{100 * summary['test_acc_mean']:.1f} +- {100 * summary['test_acc_std']:.1f} %, "
              f"{1000 * summary['seconds_per_epoch']:.1f} ms per epoch, "
              f"peak memory {summary['peak_memory_bytes'] / 2**20:.0f} MiB")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .data import dataset_help
    from .models import MODEL_DEFAULTS

    parser = argparse.ArgumentParser(prog="python -m gnnbook", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="`python -m gnnbook COMMAND --help` for each command's options")
    p = sub.add_parser("env", help="print versions and check the course's pins (exits 1 when one is violated)")
    p.set_defaults(func=_env)
    p = sub.add_parser("datasets", help="table of the shipped datasets (downloads a missing one unless --offline); "
                       "--fetch downloads and verifies them all for offline use")
    p.add_argument("--json", action="store_true", help="print one JSON list of rows instead of tables")
    p.add_argument("--markdown", action="store_true", help="print data/README.md's tables")
    p.add_argument("--offline", action="store_true", help="never download")
    p.add_argument("--fetch", action="store_true", help="download every shipped dataset's raw files that are not "
                   "found yet (into $GNNBOOK_DATA_DIR or data/) and check every file's SHA-256: run once before "
                   "a class or a flight; with --offline only checks")
    p.set_defaults(func=_datasets)
    p = sub.add_parser("train", help="full-graph node classification over several seeds")
    p.add_argument("--dataset", default="cora", help=dataset_help("the graph to train on") + " (default: cora)")
    p.add_argument("--model", default="gcn", choices=list(MODEL_DEFAULTS),
                   help="the model, with its paper's hyperparameters (gnnbook.models.MODEL_DEFAULTS; default: gcn)")
    p.add_argument("--seeds", type=int, default=5, help="train once per seed 0..N-1 and report mean and spread "
                   "(default: 5)")
    p.add_argument("--epochs", type=int, default=None, help="maximum epochs (default: the paper's)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N; cuda needs DGL's CUDA build "
                   "(PyPI's DGL is CPU-only: the command says how to install it)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (for logs and scripts)")
    p.set_defaults(func=_train)
    for register in _extensions():
        register(sub)
    return parser


def _extensions() -> list[Callable]:
    """Subcommands that higher layers (the distributed runtime) add."""
    from .distributed.commands import register as dist_commands
    from .course.commands import register as teaching_commands

    return [dist_commands, teaching_commands]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .data import DatasetError

    try:
        return args.func(args)
    except (UserError, DatasetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
