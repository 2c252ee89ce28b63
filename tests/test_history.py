"""Historical embeddings (GNNAutoScale, 5.2.3): push/pull on a hand-made graph, exactness after a full
refresh, staleness, bad input, seeds, and the distributed run's measured history bytes = the graph's boundary rows."""
import dgl
import pytest
import torch

from gnnbook.ch5_minibatch import history as H
from gnnbook.data import load_dataset
from gnnbook.models import build_model
from gnnbook.base.launch import run
from gnnbook.training.train import Optim, model_input


def _tiny(num_nodes=12, seed=0):
    """Two triangles-and-a-tail communities joined by one edge, with features, labels and masks."""
    gen = torch.Generator().manual_seed(seed)
    src = [0, 1, 2, 0, 3, 4, 5, 6, 7, 8, 6, 9, 10, 11, 5]
    dst = [1, 2, 0, 3, 4, 5, 0, 7, 8, 6, 9, 10, 11, 6, 6]   # 5 - 6 is the bridge
    g = dgl.to_bidirected(dgl.graph((src, dst), num_nodes=num_nodes))
    g.ndata["feat"] = torch.randn(num_nodes, 5, generator=gen)
    g.ndata["label"] = torch.arange(num_nodes) % 3
    for i, split in enumerate(("train", "val", "test")):
        g.ndata[f"{split}_mask"] = torch.arange(num_nodes) % 3 == i
    return g


def _model_and_setup(g, num_layers=2, num_parts=2, clusters_per_batch=1):
    setup = H.build_setup(g, num_parts, clusters_per_batch, num_layers=num_layers)
    torch.manual_seed(0)
    model = build_model("gcn", 5, 3, num_layers=num_layers).eval()
    return model, setup, model_input(model, setup.graph.ndata["feat"])


def test_full_forward_is_the_course_gcn():
    g = _tiny()
    model, setup, x = _model_and_setup(g)
    assert torch.allclose(H.full_forward(model, setup.adj, x), model(setup.graph, x), atol=1e-6)


def test_push_and_pull_move_the_rows_they_name():
    history = H.History(6, 4, 2)
    rows = torch.arange(8.0).view(2, 4).requires_grad_(True)
    history.push(1, torch.tensor([4, 1]), rows)
    assert torch.equal(history.pull(1, torch.tensor([1, 4])), rows.detach()[[1, 0]])
    assert not history.tables[1].requires_grad                      # pushing stores values, not a graph
    assert torch.equal(history.tables[0], torch.zeros(6, 4))        # the other table is untouched
    assert history.pushed == 2 and history.pulled == 2


@pytest.mark.parametrize("num_layers", [2, 3])
def test_with_an_exact_history_the_batch_forward_is_the_full_graph_forward(num_layers):
    g = _tiny()
    model, setup, x = _model_and_setup(g, num_layers)
    history = H.History(g.num_nodes(), 16, num_layers - 1)
    H.refresh(history, model, setup, x)
    assert H.staleness(history, model, setup, x) == [0.0] * (num_layers - 1)
    full = model(setup.graph, x)
    for cluster in setup.clusters:
        batch = H.make_batch(setup, cluster)
        assert len(batch.halo) > 0                                  # the bridge crosses the cut
        gas = H.gcn_forward(model, batch, x, history)
        assert torch.allclose(gas, full[cluster], atol=1e-6)
        # dropping the cut edges (Cluster-GCN) changes the bridge's endpoints
        assert not torch.allclose(H.gcn_forward(model, batch, x, None), full[cluster], atol=1e-4)
    # a stale history (zeros) gives a different answer at the nodes next to the cut, and staleness 1
    stale = H.History(g.num_nodes(), 16, num_layers - 1)
    assert H.staleness(stale, model, setup, x) == [1.0] * (num_layers - 1)
    batch = H.make_batch(setup, setup.clusters[0])
    assert not torch.allclose(H.gcn_forward(model, batch, x, stale), full[setup.clusters[0]], atol=1e-4)


def test_batch_rows_and_gradients_flow_only_through_the_batch():
    g = _tiny()
    model, setup, x = _model_and_setup(g)
    first, second = (H.make_batch(setup, cluster) for cluster in setup.clusters)
    for batch in (first, second):
        assert set(batch.halo.tolist()).isdisjoint(batch.nodes.tolist())
        neighbours = set(setup.src[torch.isin(setup.dst, batch.nodes)].tolist())
        assert set(batch.halo.tolist()) == neighbours - set(batch.nodes.tolist())
    history = H.History(g.num_nodes(), 16, 1)
    H.gcn_forward(model, first, x, history)            # pushes the first cluster's rows; its graph stays alive
    assert torch.count_nonzero(history.tables[0][first.nodes].abs().sum(1)) > 0   # pushed
    assert torch.equal(history.tables[0][first.halo], torch.zeros(len(first.halo), 16))
    model.zero_grad()
    H.gcn_forward(model, second, x, history).pow(2).sum().backward()   # its halo: the first cluster's pushed rows
    gas = [p.grad.clone() for p in model.parameters()]

    def full_graph_gradients(halo_constant: bool) -> list[torch.Tensor]:
        """DGL's forward over the whole graph, the loss on the second cluster; with ``halo_constant``, the
        hidden rows outside the cluster enter the last layer as constants."""
        inside = torch.zeros(setup.graph.num_nodes(), 1, dtype=torch.bool)
        inside[second.nodes] = True
        hook = model.layers[1].register_forward_pre_hook(
            lambda _, args: (args[0], torch.where(inside, args[1], args[1].detach())) if halo_constant else None)
        model.zero_grad()
        model(setup.graph, x)[second.nodes].pow(2).sum().backward()
        hook.remove()
        return [p.grad.clone() for p in model.parameters()]

    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(gas, full_graph_gradients(halo_constant=True)))
    # the check can tell: letting gradients through the halo's rows gives other gradients
    assert not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(gas, full_graph_gradients(halo_constant=False)))


def test_too_few_clusters_is_a_clear_error():
    g = _tiny()
    with pytest.raises(ValueError, match="num_parts=2 .*clusters_per_batch=3"):
        H.build_setup(g, num_parts=2, clusters_per_batch=3)
    with pytest.raises(ValueError, match="Too few clusters for the batch"):
        H.train(g, "gas", Optim(epochs=1), H.Clusters(2, 4))
    with pytest.raises(ValueError, match="clusters_per_batch=0"):
        H.check_batching(4, 0)
    with pytest.raises(ValueError, match="unknown method 'vrgcn'"):
        H.train(g, "vrgcn")


def test_training_repeats_with_a_seed_and_staleness_is_recorded():
    g = _tiny()
    a = H.train(g, "gas", Optim(3, epochs=6, patience=6), H.Clusters(4, 2))
    b = H.train(g, "gas", Optim(3, epochs=6, patience=6), H.Clusters(4, 2))
    assert a.to_dict() == b.to_dict() | {"seconds_per_epoch": a.seconds_per_epoch}
    assert len(a.staleness) == a.epochs_run and all(len(s) == 1 and s[0] >= 0 for s in a.staleness)
    c = H.train(g, "cluster_gcn", Optim(3, epochs=6, patience=6), H.Clusters(4, 2))
    assert c.staleness == [] and c.steps_per_epoch == 2


def test_distributed_history_bytes_are_the_boundary_rows_of_the_graph():
    job = {"dataset": "cora", "num_parts": 8, "clusters_per_batch": 2, "epochs": 40, "patience": 2}
    out = run("gnnbook.ch5_minibatch.history:distributed", 2, job, deadline_s=240)
    assert [o.rank for o in out] == [0, 1]
    assert out[0].weights_checksum == pytest.approx(out[1].weights_checksum, rel=1e-6)   # one model
    assert out[0].test_acc == out[1].test_acc
    # The ranks restore the best epoch: a run cut short at it ends with the same weights (runs repeat exactly).
    assert out[0].best_epoch == out[0].epochs_run - 3, "early stopping ran two worse epochs"
    cut = run("gnnbook.ch5_minibatch.history:distributed", 2, {**job, "epochs": out[0].best_epoch + 1}, deadline_s=240)
    assert (cut[0].weights_checksum, cut[0].test_acc) == (out[0].weights_checksum, out[0].test_acc)
    # the boundary from the graph itself: cluster c is rank c % 2's; rank r pulls, once per epoch, every
    # node of the other rank with an edge into one of its own nodes
    cora = load_dataset("cora")
    owner = torch.empty(cora.num_nodes(), dtype=torch.long)
    for c, nodes in enumerate(H.metis_clusters(cora, 8, seed=0)):
        owner[nodes] = c % 2
    src, dst = cora.edges()
    pulled_by = [len(torch.unique(src[(owner[dst] == r) & (owner[src] != r)])) for r in (0, 1)]
    for o in out:
        assert (o.hidden, o.num_tables) == (16, 1)              # GCN's 16 hidden units, one table
        rows_sent = pulled_by[1 - o.rank]
        assert o.sent_rows == rows_sent > 0 and o.received_rows == pulled_by[o.rank] > 0
        expected = o.epochs_run * rows_sent * 16 * 4                # float32 rows, every epoch
        assert o.history_bytes_formula == expected
        ops = o.summary["by_op"]["all_to_all"]
        assert ops["payload_sent"] == expected                         # what the all-to-all carried
        assert o.history_wire[0] == ops["expected_sent"]            # measured = payload + gloo headers


def test_refresh_on_eval_fills_the_history_before_the_first_step():
    g = _tiny()
    first_pull = []

    class Recording(H.History):
        def pull(self, layer, nodes):
            if not first_pull:
                first_pull.append(self.tables[layer][nodes].clone())
            return super().pull(layer, nodes)

    for refresh in (False, True):
        first_pull.clear()
        H.train(g, "gas", Optim(0, epochs=1, patience=1), H.Clusters(2, 1), hooks=H.Hooks(history_cls=Recording),
                refresh_on_eval=refresh)
        # the first batch's halo has not been computed by any step yet: zeros, unless the history was filled
        assert bool(first_pull[0].abs().sum() > 0) == refresh


def test_minibatch_lr_changes_only_the_minibatch_methods():
    g = _tiny()
    options = dict(optim=Optim(epochs=4, patience=4), clusters=H.Clusters(4, 2))   # GAS: staleness per epoch, floats
    base = {r.method: r for r in H.compare(g, [0], **options)}
    same = {r.method: r for r in H.compare(g, [0], minibatch_lr=0.01, **options)}   # 0.01: the course's lr
    other = {r.method: r for r in H.compare(g, [0], minibatch_lr=0.5, **options)}
    strip = lambda r: {k: v for k, v in r.to_dict().items() if k != "seconds_per_epoch"}  # noqa: E731
    for method in H.METHODS:
        assert strip(same[method]) == strip(base[method])
    assert strip(other["full"]) == strip(base["full"])
    assert strip(other["gas"]) != strip(base["gas"])


@pytest.mark.parametrize("method", ["gas", "cluster_gcn"])
def test_training_ends_with_the_best_epochs_weights_not_the_last(method):
    """The loop restores the best validation epoch (BestEpoch.restore).  Runs repeat exactly with a seed, so a
    run cut short at its best epoch ends with the same weights: its test accuracy is the full run's."""
    g = load_dataset("cora")
    full = H.train(g, method, Optim(0, epochs=40, patience=2, lr=0.05), H.Clusters(40, 10), track_staleness=False)
    assert full.best_epoch == full.epochs_run - 3, "early stopping ran two worse epochs, so restoring must matter"
    cut = H.train(g, method, Optim(0, epochs=full.best_epoch + 1, patience=2, lr=0.05), H.Clusters(40, 10),
                  track_staleness=False)
    assert (cut.best_epoch, cut.val_acc, cut.test_acc) == (full.best_epoch, full.val_acc, full.test_acc)
