"""Recommendation: the MovieLens loader, the split, BPR, recall/NDCG on hand-made cases, LightGCN
against PyG, PinSAGE neighbourhoods, and the DistEmbedding job against one process."""
import math
import shutil

import pytest
import torch

from gnnbook.data import RATINGS_DATASETS, DatasetError, load_ratings
from gnnbook.data.files import REPO_ROOT
from gnnbook.training.train import Optim
from gnnbook.applications.recsys import (InteractionSplit, LightGCNRanker, MatrixFactorisation, bpr_loss, fit_ranker,
                            pinsage_neighbours, rank_metrics, sample_negatives, split_interactions)


@pytest.fixture(scope="module")
def ratings():
    return load_ratings("ml-latest-small")


def test_movielens_loads_checked(ratings):
    assert (ratings.num_users, ratings.num_items, ratings.num_ratings) == (671, 9066, 100004)
    assert ratings.titles[0] == "Toy Story (1995)"
    assert int(ratings.user.max()) == 670 and int(ratings.item.max()) == 9065
    assert 0.5 <= float(ratings.rating.min()) and float(ratings.rating.max()) <= 5.0


def test_movielens_loader_refuses_a_corrupt_file_and_says_where_to_put_missing_ones(tmp_path, monkeypatch):
    folder = tmp_path / "ml-latest-small"
    folder.mkdir()
    shared = REPO_ROOT.parent / "shared" / "datasets" / "ml-latest-small"
    for name in ("movies.csv", "README.txt"):
        shutil.copy(shared / name, folder / name)
    (folder / "ratings.csv").write_bytes((shared / "ratings.csv").read_bytes()[:-30] + b"1,1,5.0,1\n")
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    with pytest.raises(DatasetError, match="checksum mismatch"):
        load_ratings("ml-latest-small")
    monkeypatch.setattr("gnnbook.data.files.search_dirs", lambda: [tmp_path / "nowhere"])
    with pytest.raises(DatasetError, match="(?s)not found and downloads are disabled.*ml-latest-small"):
        load_ratings("ml-latest-small", download=False)
    assert RATINGS_DATASETS["ml-latest-small"].url("ratings.csv").endswith("/ml-latest-small/ratings.csv")
    with pytest.raises(DatasetError, match="Did you mean 'ml-latest-small'"):
        load_ratings("ml-latest-smal")


def test_split_is_per_user_disjoint_complete_and_seeded(ratings):
    split = split_interactions(ratings, seed=1)
    parts = [split.train, split.val, split.test]
    assert sum(p.shape[1] for p in parts) == ratings.num_ratings
    keys = [set((p[0] * ratings.num_items + p[1]).tolist()) for p in parts]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    assert torch.unique(split.test[0]).numel() == ratings.num_users == torch.unique(split.val[0]).numel()
    share = split.test.shape[1] / ratings.num_ratings
    assert 0.09 < share < 0.11
    again = split_interactions(ratings, seed=1)
    assert torch.equal(again.test, split.test)
    assert not torch.equal(split_interactions(ratings, seed=2).test, split.test)
    with pytest.raises(ValueError, match="val_share"):
        split_interactions(ratings, val_share=0.6, test_share=0.5)


def test_bpr_on_hand_made_cases():
    assert float(bpr_loss(torch.zeros(3), torch.zeros(3))) == pytest.approx(math.log(2))
    assert float(bpr_loss(torch.tensor([-200.0]), torch.tensor([0.0]))) == pytest.approx(200.0)
    with pytest.raises(ValueError, match="differ in shape"):
        bpr_loss(torch.zeros(2), torch.zeros(3))


def test_recall_and_ndcg_on_hand_made_cases():
    # 1 user, 4 items scored 4 > 3 > 2 > 1; held-out items 1 and 3; item 0 seen in training
    users = torch.ones(1, 1)
    items = torch.tensor([[4.0], [3.0], [2.0], [1.0]])
    targets = torch.tensor([[0, 0], [1, 3]])
    exclude = torch.tensor([[True, False, False, False]])
    top2 = rank_metrics(users, items, targets, exclude, k=2)  # ranking 1, 2: one hit at rank 1
    assert top2["recall"] == pytest.approx(0.5)
    assert top2["ndcg"] == pytest.approx(1.0 / (1.0 + 1.0 / math.log2(3)))
    top3 = rank_metrics(users, items, targets, exclude, k=3)  # ranking 1, 2, 3: hits at ranks 1 and 3
    assert top3["recall"] == pytest.approx(1.0)
    assert top3["ndcg"] == pytest.approx((1.0 + 0.5) / (1.0 + 1.0 / math.log2(3)))
    with pytest.raises(ValueError, match="k must be"):
        rank_metrics(users, items, targets, exclude, k=0)


def test_negatives_avoid_training_items():
    seen = torch.zeros(3, 5, dtype=torch.bool)
    seen[0, :4] = True  # user 0 has one unseen item: 4
    items = sample_negatives(torch.zeros(50, dtype=torch.long), seen, torch.Generator().manual_seed(0))
    assert torch.equal(items, torch.full((50,), 4))


def _tiny_split() -> InteractionSplit:
    pairs = torch.tensor([[0, 0, 1, 1, 2, 2, 3], [0, 1, 1, 2, 2, 3, 0]])
    return InteractionSplit(4, 4, pairs, pairs[:, :2], pairs[:, 2:4])


def test_lightgcn_equals_pyg_outputs_and_gradients():
    from torch_geometric.nn.models import LightGCN

    split = _tiny_split()
    ours = LightGCNRanker(split, dim=5, layers=3)
    theirs = LightGCN(8, 5, 3)
    theirs.embedding.weight.data.copy_(ours.embedding.weight.data)
    users, items = ours.embeddings()
    reference = theirs.get_embedding(split.edge_index())
    assert torch.allclose(torch.cat([users, items]), reference, atol=1e-6)
    (users.pow(2).sum() + items[:2].sum()).backward()
    (reference[:4].pow(2).sum() + reference[4:6].sum()).backward()
    assert torch.allclose(ours.embedding.weight.grad, theirs.embedding.weight.grad, atol=1e-6)


def test_fit_ranker_learns_and_keeps_the_best_validation_epoch(ratings):
    split = split_interactions(ratings, seed=0)
    torch.manual_seed(0)
    run = fit_ranker(MatrixFactorisation(split, 16), split, Optim(lr=0.02, epochs=4), 8192, l2=1e-2, eval_every=2)
    assert run["loss"][-1] < run["loss"][0] < 0.7
    assert run["best_epoch"] in (2, 4)
    assert run["val"]["recall"] == max(recall for _, recall in run["val_recall"])
    assert run["test"]["recall"] > 0.05  # random ranking: about 20 / 9066 of the held-out items
    with pytest.raises(ValueError, match="epochs"):
        fit_ranker(MatrixFactorisation(split, 4), split, Optim(epochs=0))


def test_fit_ranker_restores_the_best_epoch_when_later_epochs_are_worse(ratings):
    split = split_interactions(ratings, seed=0)
    torch.manual_seed(0)
    run = fit_ranker(MatrixFactorisation(split, 16), split, Optim(lr=0.1, epochs=4), 8192, l2=0.0)
    recall = dict(run["val_recall"])
    assert run["best_epoch"] == 2 and recall[4] < recall[3] < recall[2]   # no l2 at lr 0.1: it overfits
    assert run["val"]["recall"] == recall[2], "the weights scored at the end are the best epoch's, not the last"


def test_pinsage_neighbours_are_co_rated_items_sorted_by_visits(ratings):
    split = split_interactions(ratings, seed=0)
    items = torch.tensor([0, 50, 300])
    neighbours, weights = pinsage_neighbours(split, items, num_neighbours=5, seed=0)
    assert neighbours.shape == weights.shape == (3, 5)
    assert (weights[:, :-1] >= weights[:, 1:]).all() and (weights > 0).all()
    assert not (neighbours == items.unsqueeze(1)).any()
    rated = torch.zeros(split.num_users, split.num_items, dtype=torch.bool)
    rated[split.train[0], split.train[1]] = True
    for item, row in zip(items, neighbours):  # a walk of two steps lands on an item sharing a user
        sharing = (rated[:, item].unsqueeze(1) & rated[:, row]).any(0)
        assert bool(sharing[0]), "the most visited neighbour shares a user with the item"
    again, _ = pinsage_neighbours(split, items, num_neighbours=5, seed=0)
    assert torch.equal(again, neighbours)


@pytest.mark.timeout(300)
def test_distembedding_job_equals_one_process(ratings):
    from gnnbook.applications.sharded_embedding import train_sharded_mf, train_single_mf

    split = split_interactions(ratings, seed=0)
    options = dict(dim=8, epochs=2, batch_size=8192, lr=0.02, l2=1e-2, seed=0)
    single = train_single_mf(split, **options)
    sharded = train_sharded_mf(split, **options)
    assert sharded["world"] == 2 and 0.2 < sharded["remote_share"] < 0.8
    assert max(abs(a - b) for a, b in zip(single["losses"], sharded["losses"])) < 1e-5
    assert torch.allclose(sharded["items"], single["items"], atol=1e-5)
    assert torch.allclose(sharded["users"], single["users"], atol=1e-5)
    with pytest.raises(ValueError, match="multiple of num_parts"):
        train_sharded_mf(split, batch_size=8191)


def test_python_m_gnnbook_datasets_lists_movielens(capsys):
    from gnnbook.cli import main

    assert main(["datasets"]) == 0
    assert "ml-latest-small        671    9066   100004" in capsys.readouterr().out


def test_a_process_with_an_empty_share_of_the_last_batch_adds_zero_not_nan():
    """A last batch smaller than the world gives a process no interactions (issue 22, item 9): the
    shares' losses still add up to the whole batch's loss, and no gradient is NaN."""
    from gnnbook.applications.sharded_embedding import _rows, _step_loss

    generator = torch.Generator().manual_seed(0)
    table = torch.randn(12, 4, generator=generator, requires_grad=True)   # 6 users, then 6 items
    users, positives, negatives = torch.tensor([1, 2]), torch.tensor([0, 3]), torch.tensor([4, 5])
    whole = _step_loss(table[_rows(users, positives, negatives, 6)], users, positives, negatives, 2, 1e-2)
    world = 3                                  # 2 interactions over 3 processes: one gets none
    parts = []
    for rank in range(world):
        share = slice(rank * 2 // world, (rank + 1) * 2 // world)
        rows = table[_rows(users[share], positives[share], negatives[share], 6)]
        parts.append(_step_loss(rows, users[share], positives[share], negatives[share], 2, 1e-2))
    assert any(len(users[slice(r * 2 // world, (r + 1) * 2 // world)]) == 0 for r in range(world))
    total = sum(parts)
    assert torch.isfinite(total) and abs(float(total) - float(whole)) < 1e-6
    total.backward()
    assert torch.isfinite(table.grad).all()
