"""gnnbook.training.train: accuracy, determinism, early stopping, result record, AUC."""
import numpy as np
import pytest
import torch

from gnnbook.data import load_dataset
from gnnbook.base.memory import PeakMemory
from gnnbook.training.train import (
    BestEpoch,
    accuracy,
    epoch_metrics,
    Optim,
    fit_node_classifier,
    model_input,
    prepare_graph,
    roc_auc,
    split_edges,
    summarize,
    train_node_classifier,
    train_over_seeds,
    train_vgae,
)


@pytest.fixture(scope="module")
def cora():
    return load_dataset("cora")


def test_gcn_on_cora_learns_and_repeats(cora):
    a = train_node_classifier(cora, "gcn", Optim(seed=1), progress=False)
    b = train_node_classifier(cora, "gcn", Optim(seed=1), progress=False)
    assert a.test_acc >= 0.79
    assert a.test_acc == b.test_acc and a.best_epoch == b.best_epoch, "same seed, same run"
    assert 0 < a.seconds_per_epoch < 1
    assert len(a.history) == a.epochs_run and a.history[-1]["epoch"] == a.epochs_run - 1


def test_early_stopping_stops_after_patience(cora):
    r = train_node_classifier(cora, "gcn", Optim(0, epochs=400, patience=5), progress=False)
    assert r.epochs_run < 400 and r.epochs_run - 1 - r.best_epoch == 5


def test_best_epoch_picks_accuracy_then_loss_and_keeps_a_copy_of_those_weights():
    model = torch.nn.Linear(1, 1, bias=False)
    best = BestEpoch(patience=2)
    # epoch 2 ties epoch 1's accuracy at a lower loss; epoch 4 ties epoch 2 exactly (the earlier one stays)
    curve = [(0.5, 1.0), (0.7, 0.9), (0.7, 0.8), (0.6, 0.5), (0.7, 0.8)]
    stops = []
    for epoch, (val_acc, val_loss) in enumerate(curve):
        with torch.no_grad():
            model.weight.fill_(epoch)                       # in place, as an optimiser's step is
        stops.append(best.update(model, epoch, val_acc, val_loss))
    assert (best.epoch, best.val_acc, best.val_loss) == (2, 0.7, 0.8)
    assert stops == [False, False, False, False, True]  # two epochs without improvement
    assert float(best.state["weight"]) == 2.0, "the state is epoch 2's weights, not a view of the live ones"


def test_fit_returns_the_model_of_the_best_epoch_not_the_last(cora):
    model, result = fit_node_classifier(cora, "gcn", Optim(0, epochs=400, patience=5), progress=False)
    assert not model.training, "the returned model is in eval mode"
    assert result.test_acc == train_node_classifier(cora, "gcn", Optim(0, epochs=400, patience=5),
                                                    progress=False).test_acc
    best, last = result.history[result.best_epoch], result.history[-1]
    assert (last["val_acc"], -last["val_loss"]) < (best["val_acc"], -best["val_loss"]), "restoring must matter"
    g = prepare_graph(cora)
    masks = {split: g.ndata[f"{split}_mask"] for split in ("train", "val", "test")}
    with torch.no_grad():
        logits = model(g, model_input(model, g.ndata["feat"]))
    assert epoch_metrics(logits, g.ndata["label"], masks) == pytest.approx(
        {k: best[k] for k in ("val_loss", "val_acc", "train_acc")}, abs=1e-6), "the best epoch's weights"
    assert accuracy(logits[masks["test"]], g.ndata["label"][masks["test"]]) == result.test_acc, \
        "the model is the one that was scored"


def test_summary_over_seeds(cora):
    results = train_over_seeds(cora, "sage", seeds=[0, 1], optim=Optim(epochs=30), progress=False)
    s = summarize(results)
    assert s["seeds"] == [0, 1] and len(s["test_acc"]) == 2
    assert np.isclose(s["test_acc_mean"], np.mean(s["test_acc"]))
    assert {"test_acc_std", "seconds_per_epoch", "peak_memory_bytes"} <= set(s)


def test_roc_auc_known_values():
    assert roc_auc(np.array([0.1, 0.2, 0.8, 0.9]), np.array([0, 0, 1, 1])) == 1.0
    assert roc_auc(np.array([0.9, 0.8, 0.2, 0.1]), np.array([0, 0, 1, 1])) == 0.0
    assert roc_auc(np.array([0.5, 0.5]), np.array([0, 1])) == 0.5


def test_split_edges_keeps_held_out_edges_out_of_the_training_graph(cora):
    train_graph, pairs = split_edges(cora, seed=0)
    n = cora.num_nodes()
    src, dst = (t.numpy() for t in cora.edges())
    edges = set((src * n + dst).tolist())
    train_src, train_dst = (t.numpy() for t in train_graph.edges())
    training = set((train_src * n + train_dst).tolist())
    held = set()
    for split, (u, v, negatives) in pairs.items():
        pair_keys = set((u * n + v).tolist()) | set((v * n + u).tolist())
        assert pair_keys <= edges and len(pair_keys) == 2 * len(u), split
        assert not pair_keys & training, f"{split} edges leak into the training graph"
        assert not held & pair_keys, "validation and test edges are disjoint"
        held |= pair_keys
        negative_keys = set((negatives[:, 0] * n + negatives[:, 1]).tolist())
        assert len(negative_keys) == len(u) and not negative_keys & edges, f"{split} negatives are non-edges"
    assert len(pairs["test"][0]) == int(0.1 * len(edges) / 2)
    assert training | held == edges, "every edge is either trained on or held out, in both directions"
    assert torch.equal(train_graph.ndata["feat"], cora.ndata["feat"])


def test_vgae_link_prediction_beats_random(cora):
    auc = train_vgae(cora, progress=False)  # the paper reports 0.914 on Cora
    assert auc["test"] > 0.88 and auc["val"] > 0.88


def test_peak_memory_sees_a_50_mb_allocation():
    with PeakMemory() as peak:
        block = np.ones(50_000_000, dtype=np.uint8)
        del block
    assert 45e6 < peak.peak_bytes < 80e6


def test_peak_memory_leaves_out_pages_of_mapped_files(tmp_path):
    # Like a library's code pages faulted in by a first call: file-backed,
    # still mapped when the block ends, and not the block's data.
    path = tmp_path / "pages.bin"
    path.write_bytes(np.ones(40_000_000, dtype=np.uint8).tobytes())
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    with PeakMemory() as peak:
        total = int(mapped[::4096].sum())  # touches every page
        data = np.ones(20_000_000, dtype=np.uint8)
        del data
    assert total == len(range(0, 40_000_000, 4096))
    assert 15e6 < peak.peak_bytes < 30e6, peak.peak_bytes
