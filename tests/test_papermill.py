"""A teacher's run: dataset-taking notebooks once more through papermill, with a non-default
shipped dataset or parameter set, and every claim they record must hold.

``ALTERNATIVES`` names one alternative for every such notebook.  ``make test`` runs those
that take under ~40 s here; the others (``MATRIX_ONLY``, each 40-100 s: together about 9 of
``make test``'s minutes) run under ``make test-matrix`` (tests/matrix.py), which runs every
notebook over every dataset and parameter set it supports, these alternatives among them.
"""
import os

import pytest

from gnnbook.course.claims import NOT_HERE, read_claims
from matrix import MATRIX, ROOT, VARIANTS, run_notebook  # tests/ is on sys.path under pytest

ALTERNATIVES = [
    ("chapters/01_introduction.ipynb", {"dataset": "cora"}),
    ("chapters/02_gnn_models.ipynb", {"dataset": "citeseer"}),   # seeds: the default 5
    ("chapters/04_gnn_training.ipynb", {"dataset": "citeseer"}),   # amazon-photo: 210 s, make test-matrix
    ("chapters/05a_minibatch_training_and_sampling.ipynb", {"dataset": "citeseer"}),
    ("chapters/05b_feature_caching.ipynb", {"dataset": "citeseer"}),
    ("chapters/05c_execution_engine.ipynb", {"dataset": "citeseer", "num_machines": 3}),
    ("chapters/05e_sampler_accuracy.ipynb", {"dataset": "citeseer"}),
    ("chapters/05f_distributed_cache.ipynb", {"dataset": "citeseer"}),
    ("chapters/05g_historical_embeddings.ipynb", {"dataset": "citeseer"}),
    ("chapters/06a_fullgraph_parallelism.ipynb", {"dataset": "citeseer", "num_parts": 4}),
    ("chapters/06b_operator_parallelism.ipynb", {"dataset": "citeseer", "process_counts": [3, 4]}),
    ("chapters/06c_sync_and_async_protocols.ipynb", {"dataset": "citeseer", "num_parts": 3}),
    ("chapters/07_gnn_systems.ipynb", {"dataset": "citeseer"}),
    ("chapters/08_dgl_practice.ipynb", {"dataset": "citeseer"}),
    ("labs/lab05_feature_cache.ipynb", {"dataset": "citeseer"}),
    ("labs/lab05b_historical_embeddings.ipynb", {"dataset": "citeseer"}),
    ("labs/lab06_halo_exchange.ipynb", {"dataset": "amazon-photo", "num_parts": 3}),
    # the only ratings dataset shipped; the other parameter set is narrower and shallower
    ("labs/lab10_recommendation.ipynb", {"dataset": "ml-latest-small", "dim": 32, "layers": 2}),
    # the only traffic series shipped; the other parameter set is a shorter window and horizon
    ("labs/lab11_spatiotemporal_index_batching.ipynb", {"dataset": "los-loop", "horizon": 3}),
    # unaligned widths (745: Amazon-Photo's own), so the zero-copy rows straddle 128-byte lines
    ("labs/lab12_feature_loading.ipynb", {"dataset": "citeseer", "widths": [24, 100, 745]}),
]


# notebook id -> seconds its alternative took in CI (stop 31's clean-clone run); each runs in make test-matrix
# (02: its default run already reproduces the papers on CiteSeer as well as Cora; the alternative's VGAE and demos
# on CiteSeer, and the checks below, run in the matrix)
MATRIX_ONLY = {"08": 103, "05e": 69, "02": 69, "05a": 69, "04": 63, "05f": 46, "05g": 46, "lab10": 43, "06c": 42}


def _id(notebook: str) -> str:
    return notebook.split("/")[1].split("_")[0]


def _measured(results: dict, key: str):
    # a key of the results file, at the top level or in its "measured" dict (gnnbook.course.claims)
    return results[key] if key in results else results["measured"][key]


def _pairs():
    return [alt.values if hasattr(alt, "values") else alt for alt in ALTERNATIVES]


def test_alternatives_cover_every_dataset_taking_notebook():
    assert {nb for nb, _ in _pairs()} == set(MATRIX)
    for notebook, parameters in _pairs():
        assert (ROOT / notebook).exists(), notebook
        assert parameters["dataset"] in MATRIX[notebook], f"{notebook} does not support {parameters['dataset']}"
        others = {k: v for k, v in parameters.items() if k != "dataset"}
        if notebook in VARIANTS:           # its other parameters are among those the matrix runs
            assert others in VARIANTS[notebook], f"{notebook}: {others} is not in VARIANTS"
        elif _id(notebook) in MATRIX_ONLY:  # the matrix runs it, or it would run nowhere
            assert not others, f"{notebook}: add {others} to VARIANTS, or make test runs it"
    assert set(MATRIX_ONLY) <= {_id(nb) for nb, _ in _pairs()}


def _in_make_test(notebook: str, parameters: dict):
    if _id(notebook) not in MATRIX_ONLY or os.environ.get("GNNBOOK_ALL_ALTERNATIVES"):
        return (notebook, parameters)
    return pytest.param(notebook, parameters, marks=pytest.mark.skip(
        reason=f"{MATRIX_ONLY[_id(notebook)]} s: runs in make test-matrix (or set GNNBOOK_ALL_ALTERNATIVES=1)"))


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("notebook, parameters", [_in_make_test(nb, p) for nb, p in ALTERNATIVES],
                         ids=[_id(nb) for nb, _ in _pairs()])
def test_notebook_with_another_dataset(notebook, parameters, tmp_path):
    run = run_notebook(notebook, parameters, tmp_path)
    assert run.holds, f"{notebook} with {parameters}: {run.detail}"
    results = read_claims(next(tmp_path.glob("*.json")))
    assert all(claim["holds"] in (True, NOT_HERE) for claim in results["claims"]), results["claims"]
    if notebook.startswith("chapters/02"):
        # chapter 2's reproduction numbers, read back (top level or under "measured")
        assert _measured(results, "dataset") == "citeseer"
        seeds = _measured(results, "seeds")
        assert (len(seeds) if isinstance(seeds, list) else seeds) == 5
        assert _measured(results, "gcn_test_acc_mean") >= 0.693, "GCN on CiteSeer: paper 70.3, at most ~1 point below"
        assert 0 <= _measured(results, "gcn_test_acc_std") < 0.03
        assert _measured(results, "vgae_test_auc") > 0.8
