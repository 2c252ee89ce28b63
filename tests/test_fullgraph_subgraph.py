"""Subgraph-parallel full-graph training (6.1.1) on K = 2 and 4 real processes: the same losses,
weights and accuracy as one process with DGL's layers; halo bytes measured = the formula."""
import pytest
import torch

from gnnbook.data import load_dataset
from gnnbook.ch6_fullgraph.subgraph import halo_bytes_formula, local_graph, prepare, reference, run_subgraph
from gnnbook.comm.gloo_bytes import PREAMBLE_BYTES
from gnnbook.ch6_fullgraph.partitioners import partition, partition_metrics

EPOCHS, HIDDEN = 6, 16


def test_local_graphs_fit_together():
    g = prepare(load_dataset("cora"), "gcn")
    a = partition(g, 3, "random")
    parts = [local_graph(g, a, r, "gcn") for r in range(3)]
    assert sorted(torch.cat([p.owned for p in parts]).tolist()) == list(range(g.num_nodes()))
    for r in range(3):
        for j in range(3):
            assert parts[r].recv_counts[j] == parts[j].send_counts[r]       # what j sends is what r expects
    assert [len(p.halo) for p in parts] == partition_metrics(g, a)["halo_sizes"]
    # every in-edge of a part's nodes is in its aggregation matrix
    assert sum(p.adjacency._nnz() for p in parts) == g.num_edges()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("model, k, partitioner", [("gcn", 2, "metis"), ("sage", 4, "random")])
def test_equals_single_process_and_bytes_match_the_formula(model, k, partitioner):
    out = run_subgraph("cora", model, num_parts=k, partitioner=partitioner, epochs=EPOCHS, hidden=HIDDEN,
                       deadline_s=240)
    ref = reference("cora", model, epochs=EPOCHS, hidden=HIDDEN)
    for o in out:
        assert max(abs(a - b) for a, b in zip(o.losses, ref.losses)) < 1e-4, (o.losses, ref.losses)
        for name, t in ref.weights.items():
            assert torch.allclose(o.weights[name], t, atol=1e-4), (name, float((o.weights[name] - t).abs().max()))
        # same predictions up to at most one test node flipped by float rounding (1000 test nodes)
        assert abs(o.test_acc - ref.test_acc) <= 1e-3 + 1e-9
    # payload: every halo row, every layer, forward and backward, float32
    graph = prepare(load_dataset("cora"), model)
    halo = partition_metrics(graph, out[0].assignment)["halo_sizes"]
    assert [o.halo for o in out] == halo
    per_epoch_payload = [2 * 4 * HIDDEN * (o.halo_rows_sent + o.halo_rows_received) for o in out]
    assert sum(per_epoch_payload) == halo_bytes_formula(halo, HIDDEN)
    # measured on the sockets, every epoch: payload + gloo headers (48 B x 3 per message,
    # K-1 messages per all_to_all, 2 layers x forward and backward)
    headers = 4 * 3 * PREAMBLE_BYTES * (k - 1)
    for o, payload in zip(out, per_epoch_payload):
        assert o.halo_bytes_sent == [payload + headers] * EPOCHS, (o.rank, o.halo_bytes_sent, payload)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="num_parts must lie in 1..2708"):
        run_subgraph("cora", "gcn", num_parts=3000)
    with pytest.raises(ValueError, match="unknown model 'gat'"):
        run_subgraph("cora", "gat", num_parts=2)
    with pytest.raises(ValueError, match="unknown partitioner"):
        run_subgraph("cora", "gcn", num_parts=2, partitioner="hash")
