"""Operator parallelism (6.1.2, CAGNET): the 1D and 2D distributed SpMM equal the unsplit product
(forward and the A^T backward), move exactly the bytes of their formulas, and a GCN trained on them
equals one process."""
import pytest
import torch

from gnnbook.data import load_dataset
from gnnbook.ch6_fullgraph import spmm
from gnnbook.ch6_fullgraph.subgraph import prepare, reference
from gnnbook.base.launch import run_sequence

EPOCHS, HIDDEN, WIDTH = 5, 16, 16


def _check_products(out, ref, n, nnz, processes, mode):
    covered = torch.zeros(n, WIDTH, dtype=torch.bool)
    for o in out:
        a, b = o.cols
        assert torch.allclose(o.out, ref["out"][o.rows, a:b], atol=1e-5)
        assert torch.allclose(o.grad, ref["grad"][o.rows, a:b], atol=1e-5)
        covered[o.rows, a:b] = True
        # payload = the formula (gloo's binomial tree), measured wire = payload + gloo's headers
        assert (o.payload_sent, o.payload_received) == (o.formula_sent, o.formula_received), o
        assert o.wire_sent == o.expected_wire_sent, o
        assert o.wire_sent > o.payload_sent
    assert bool(covered.all())                                  # the blocks tile the whole product
    # summed over processes, what they received is CAGNET's textbook volume
    assert sum(o.payload_received for o in out) == spmm.textbook_bytes(n, nnz, WIDTH, processes)[mode]


def _check_training(out, ref):
    for o in out:
        assert max(abs(a - b) for a, b in zip(o.losses, ref.losses)) < 1e-4, (o.losses, ref.losses)
        for name, t in ref.weights.items():
            assert torch.allclose(o.weights[name], t, atol=1e-4), name
        assert abs(o.test_acc - ref.test_acc) <= 1e-3 + 1e-9
        # every epoch: measured socket bytes = gloo's model of the calls made (payload + headers)
        assert o.epoch_wire_sent == [m["wire_sent"] for m in o.epoch_model]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("processes", [2, 4])
def test_products_and_training_equal_one_process(processes):
    graph = prepare(load_dataset("cora"), "gcn")
    n, nnz = graph.num_nodes(), graph.num_edges()
    jobs = [("gnnbook.ch6_fullgraph.spmm:product", dict(mode="1d", width=WIDTH)),
            ("gnnbook.ch6_fullgraph.spmm:train", dict(mode="1d", epochs=EPOCHS, hidden=HIDDEN))]
    if processes == 4:
        jobs += [("gnnbook.ch6_fullgraph.spmm:product", dict(mode="2d", width=WIDTH, ordering="metis")),
                 ("gnnbook.ch6_fullgraph.spmm:train", dict(mode="2d", ordering="metis", epochs=EPOCHS, hidden=HIDDEN))]
    outs = run_sequence(jobs, processes, deadline_s=360)
    prod_ref = spmm.product_reference("cora", WIDTH)
    train_ref = reference("cora", "gcn", epochs=EPOCHS, hidden=HIDDEN)
    _check_products(outs[0], prod_ref, n, nnz, processes, "1d")
    _check_training(outs[1], train_ref)
    if processes == 4:
        _check_products(outs[2], prod_ref, n, nnz, processes, "2d")
        _check_training(outs[3], train_ref)
        # on Cora at width 16, above the crossover width, 2D moves fewer bytes than 1D
        assert WIDTH > spmm.crossover_width(n, nnz, 2)
        assert sum(o.payload_received for o in outs[2]) < sum(o.payload_received for o in outs[0])


def test_formulas():
    assert spmm.split_sizes(10, 3) == [4, 3, 3]
    # 1D: every process receives all other blocks; summed over ranks, sent = received
    sizes = [3, 3, 2, 2]
    per_rank = [spmm.bytes_1d(sizes, 4, rank=r) for r in range(4)]
    assert sum(s for s, _ in per_rank) == sum(r for _, r in per_rank) == spmm.textbook_bytes(10, 0, 4, 4)["1d"]
    nnz = [[5, 1], [2, 4]]
    per_rank = [spmm.bytes_2d([3, 2], 4, nnz, rank=r) for r in range(4)]
    assert sum(s for s, _ in per_rank) == sum(r for _, r in per_rank) == spmm.textbook_bytes(5, 12, 4, 4)["2d"]
    assert spmm.crossover_width(100, 600, 2) == 9.0


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="square number of processes"):
        spmm.run_operator("cora", "2d", processes=2)
    with pytest.raises(ValueError, match="square number of processes"):
        spmm.grid_side(8)
    with pytest.raises(ValueError, match="unknown mode '3d'"):
        spmm.run_operator("cora", "3d", processes=4)
    with pytest.raises(ValueError, match="unknown ordering 'hash'"):
        spmm.run_operator("cora", "1d", processes=2, ordering="hash")
    with pytest.raises(ValueError, match="unknown ordering"):
        spmm.order_nodes(prepare(load_dataset("cora"), "gcn"), 2, "hash")
