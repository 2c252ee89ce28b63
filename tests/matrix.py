"""Every dataset-taking notebook over every shipped dataset it accepts, run as a teacher would.

Each run executes the notebook with papermill (its default parameters plus
``dataset``), has it write its claims (``results_path``, see
:mod:`gnnbook.course.claims`), and counts the run as holding when the notebook ran
to the end (every assert held) and every claim it recorded holds; the table
says how many claims were recorded.

    python tests/matrix.py                        # all notebooks x all datasets (make test-matrix)
    python tests/matrix.py --only 04 --datasets citeseer

prints one table, notebook x dataset (x the other parameter sets of VARIANTS; and the scale-ups of SCALE_UPS,
for notebooks that take no dataset) -> holds / failed and seconds, and exits
non-zero when any run failed.  ``tests/test_papermill.py`` runs one
non-default dataset or parameter set per notebook of this table on every ``make test``, but for
the slowest (its ``MATRIX_ONLY``), which only this table runs.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("cora", "citeseer", "amazon-photo", "amazon-computers", "coauthor-cs")

# notebook -> the datasets its parameters cell says it supports (the default among them)
MATRIX: dict[str, tuple[str, ...]] = {
    "chapters/01_introduction.ipynb": SHIPPED,
    "chapters/02_gnn_models.ipynb": ("cora", "citeseer"),
    # amazon-computers is refused by its parameters cell (full-graph GraphSAGE at lr 0.01 diverges there)
    "chapters/04_gnn_training.ipynb": ("cora", "citeseer", "amazon-photo", "coauthor-cs"),
    "chapters/05a_minibatch_training_and_sampling.ipynb": ("cora", "citeseer"),
    "chapters/05b_feature_caching.ipynb": ("cora", "citeseer", "amazon-photo"),
    "chapters/05c_execution_engine.ipynb": ("cora", "citeseer", "amazon-photo"),
    "chapters/05e_sampler_accuracy.ipynb": ("cora", "citeseer"),
    "chapters/05f_distributed_cache.ipynb": ("cora", "citeseer"),
    "chapters/05g_historical_embeddings.ipynb": ("cora", "citeseer", "amazon-photo"),
    "chapters/06a_fullgraph_parallelism.ipynb": ("cora", "citeseer", "amazon-photo"),
    "chapters/06b_operator_parallelism.ipynb": ("cora", "citeseer", "amazon-photo"),
    "chapters/06c_sync_and_async_protocols.ipynb": ("cora", "citeseer"),
    "chapters/07_gnn_systems.ipynb": ("cora", "citeseer", "amazon-photo"),
    # amazon-computers is refused here too (it trains chapter 4's full-graph GraphSAGE)
    "chapters/08_dgl_practice.ipynb": ("cora", "citeseer", "amazon-photo", "coauthor-cs"),
    "labs/lab05_feature_cache.ipynb": ("cora", "citeseer", "amazon-photo"),
    "labs/lab05b_historical_embeddings.ipynb": ("cora", "citeseer"),
    "labs/lab06_halo_exchange.ipynb": ("cora", "citeseer", "amazon-photo"),
    "labs/lab10_recommendation.ipynb": ("ml-latest-small",),  # user-item ratings, not a node-classification graph
    "labs/lab11_spatiotemporal_index_batching.ipynb": ("los-loop",),  # a traffic series, not a graph dataset
    "labs/lab12_feature_loading.ipynb": ("cora", "citeseer", "amazon-photo"),
}

# notebook -> the other parameter sets its parameters cell says it supports, each run with every dataset
# of MATRIX too (a notebook not named here runs once per dataset, with its defaults)
VARIANTS: dict[str, tuple[dict, ...]] = {
    # citeseer's 120 training nodes hold 3 minibatches of 32, not 4: K=4 runs with batch_size 24
    "chapters/05c_execution_engine.ipynb": ({}, {"num_machines": 3}, {"num_machines": 4, "batch_size": 24}),
    "chapters/06c_sync_and_async_protocols.ipynb": ({}, {"num_parts": 3}, {"num_parts": 4}),
    # the only ratings dataset shipped: its other parameter set is narrower and shallower
    "labs/lab10_recommendation.ipynb": ({}, {"dim": 32, "layers": 2}),
}

# notebook without a dataset parameter -> the scale-up parameter sets its parameters cell advertises
SCALE_UPS: dict[str, tuple[dict, ...]] = {
    "chapters/08b_beyond_one_machine.ipynb": ({"num_nodes": 1_000_000, "machine_memory": "1.2GiB"},),
    "chapters/09_outlook.ipynb": ({"scale_nodes": 500_000},),
}


@dataclass
class Run:
    notebook: str
    parameters: dict
    holds: bool
    seconds: float
    detail: str  # failed claims, or the error that stopped the notebook

    @property
    def dataset(self) -> str:
        return str(self.parameters.get("dataset", "(default)"))


def run_notebook(notebook: str, parameters: dict, out_dir: Path, timeout_s: int = 1800) -> Run:
    """Execute ``notebook`` (relative to the repository) with ``parameters`` and
    read back its claims; never raises for a failing notebook."""
    from gnnbook.course.claims import read_claims
    from gnnbook.course.course_run import execute_notebook

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = Path(notebook).stem + "".join(f"_{v}" for v in parameters.values())
    results = out_dir / f"{stem}.json"
    results.unlink(missing_ok=True)
    start = time.perf_counter()
    try:
        execute_notebook(ROOT / notebook, out_dir / f"{stem}.ipynb", {**parameters, "results_path": str(results)},
                         cell_timeout_s=timeout_s)
    # a failed assert arrives as PapermillExecutionError, a cell past its deadline as CellDeadline
    except Exception as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        return Run(notebook, parameters, False, time.perf_counter() - start,
                   " | ".join(lines[-3:])[:400] if lines else traceback.format_exc(limit=1))
    seconds = time.perf_counter() - start
    if not results.exists():
        return Run(notebook, parameters, False, seconds, f"ran, but wrote no results file {results.name}")
    claims = read_claims(results)["claims"]
    failed = [c["claim"] for c in claims if c["holds"] is False]  # NOT_HERE: untested here, says why; not failed
    return Run(notebook, parameters, not failed, seconds,
               f"{len(claims)} claims hold" if not failed else "failed: " + "; ".join(failed))


def table(runs: list[Run]) -> str:
    width = max(len(r.notebook) for r in runs)
    lines = [f"{'notebook':<{width}}  {'dataset':<17} {'other':<14} {'result':<7} {'seconds':>7}  detail"]
    for r in runs:
        other = ",".join(f"{k}={v}" for k, v in r.parameters.items() if k != "dataset")
        lines.append(f"{r.notebook:<{width}}  {r.dataset:<17} {other:<14} {'holds' if r.holds else 'FAILED':<7} "
                     f"{r.seconds:7.0f}  {r.detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="notebooks whose path contains one of these")
    parser.add_argument("--datasets", nargs="*", default=None, help="only these datasets")
    parser.add_argument("--out", default=None, help="keep the executed notebooks and results here")
    args = parser.parse_args(argv)
    # absolute: each notebook runs in its own folder, where a relative results path would land
    out = Path(args.out).resolve() if args.out else Path(tempfile.mkdtemp(prefix="gnnbook-matrix-"))
    selected = [(notebook, {"dataset": dataset, **variant}) for notebook, datasets in MATRIX.items()
                for dataset in datasets if not args.datasets or dataset in args.datasets
                for variant in VARIANTS.get(notebook, ({},))]
    selected += [(notebook, parameters) for notebook, sets in SCALE_UPS.items() if not args.datasets
                 for parameters in sets]
    runs = []
    for notebook, parameters in selected:
        if args.only and not any(word in notebook for word in args.only):
            continue
        run = run_notebook(notebook, parameters, out)
        print(f"{'holds ' if run.holds else 'FAILED'} {run.seconds:6.0f} s  {notebook} {parameters}: {run.detail}",
              flush=True)
        runs.append(run)
    if not runs:
        print("nothing selected", file=sys.stderr)
        return 2
    print("\n" + table(runs))
    print(f"\nexecuted notebooks and results in {out}")
    return 0 if all(r.holds for r in runs) else 1


if __name__ == "__main__":
    # this checkout's gnnbook, for this process and for the kernels papermill starts
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)]
                                               + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    sys.exit(main())
