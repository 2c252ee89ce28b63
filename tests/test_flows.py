"""gnnbook.training.flows (both flows to convergence), gnnbook.training.minibatch.full_graph_boundary,
gnnbook.distributed.leftovers."""
import os
import subprocess
import sys
import time

import dgl
import torch

from gnnbook.data import load_dataset
from gnnbook.distributed import emulation
from gnnbook.training.flows import FlowComparison, compare_flows
from gnnbook.distributed.leftovers import leftovers, own_job_prefix
from gnnbook.training.minibatch import Batches, full_graph_boundary, minibatch_step, train_minibatch
from gnnbook.training.train import Optim, TrainResult


def _result(test_acc, best_epoch, epochs_run):
    return TrainResult("sage", 0, test_acc, 0.5, best_epoch, epochs_run, 0.01, 0)


def test_converged_means_every_run_stopped_on_patience():
    stopped = FlowComparison([_result(0.8, 10, 21)], [_result(0.79, 5, 11)], patience=(10, 5))
    assert stopped.converged and abs(stopped.gap - 0.01) < 1e-12
    budget_ran_out = FlowComparison([_result(0.8, 10, 21)], [_result(0.7, 28, 30)], patience=(10, 5))
    assert not budget_ran_out.converged


def test_compare_flows_trains_both_to_convergence():
    graph = load_dataset("powerlaw", num_nodes=400, avg_degree=6, num_features=8)
    flows = compare_flows(graph, "sage", [0], Batches([5, 5], 64), full=Optim(epochs=300, patience=10),
                          minibatch=Optim(epochs=300, patience=5))
    assert flows.converged, [(r.best_epoch, r.epochs_run) for r in flows.full + flows.minibatch]
    assert [row["flow"] for row in flows.rows()] == ["full-graph", "minibatch"]


def test_train_minibatch_uses_the_given_step():
    graph = load_dataset("powerlaw", num_nodes=300, avg_degree=4, num_features=8)
    calls = []

    def counting_step(*args):
        calls.append(1)
        return minibatch_step(*args)

    result = train_minibatch(graph, "sage", Optim(epochs=2, patience=5), Batches([3, 3], 1000),
                             step=counting_step, progress=False)
    assert len(calls) == result.epochs_run == 2  # one minibatch per epoch: all training nodes fit


def test_full_graph_boundary_counts_halo_nodes_per_part():
    # 0 -> 1 -> 2 -> 3 and 3 -> 0, split {0, 1} | {2, 3}: part 0 sees node 3, part 1 sees node 1
    graph = dgl.graph(([0, 1, 2, 3], [1, 2, 3, 0]))
    graph.ndata["feat"] = torch.zeros(4, 10)
    owner = torch.tensor([0, 0, 1, 1])
    out = full_graph_boundary(graph, owner, hidden=16, num_layers=3)
    assert out["halo_nodes_per_part"] == [1, 1] and out["halo_nodes"] == 2
    assert out["edge_cut"] == 0.5
    assert out["feature_bytes_once"] == 2 * 10 * 4
    assert out["boundary_bytes_per_epoch"] == 2 * 16 * 4 * 2 * 2


def test_leftovers_sees_own_children_and_own_segments_only(tmp_path):
    assert not leftovers()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    mine = emulation.SHM_DIR / f"{own_job_prefix()}test{os.urandom(2).hex()}m0_x"
    other = emulation.SHM_DIR / f"{own_job_prefix(1)}test{os.urandom(2).hex()}m0_x"  # pid 1's job: not ours
    try:
        mine.write_bytes(b"")
        other.write_bytes(b"")
        found = leftovers()
        assert child.pid in found.processes and found.segments == [mine.name], found
        assert "left processes" in str(found)
    finally:
        child.kill()
        child.wait()
        mine.unlink(missing_ok=True)
        other.unlink(missing_ok=True)
    time.sleep(0.1)
    assert not leftovers()


def test_job_tags_start_with_the_own_job_prefix():
    assert emulation.new_job_tag().startswith(own_job_prefix())
