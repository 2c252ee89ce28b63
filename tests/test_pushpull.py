"""Push, pull and the push-pull hybrid (5.2.2) on real processes: the one-process logits and gradients,
payload bytes = formula, every socket byte explained, the hybrid's modelled cost the least (and the
minimum cut the true minimum, by enumeration on a small graph), bad input named."""
import itertools

import numpy as np
import pytest
import torch

from gnnbook.ch5_minibatch import pushpull as pp
from gnnbook.comm.gloo_bytes import PREAMBLE_BYTES
from gnnbook.base.launch import run

COST = {"compute_s_per_row": [2e-6, 2e-6, 2e-6], "link_s_per_byte": 1e-7}   # a mix of push and pull on Cora


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_mode_equals_one_process_and_its_bytes_are_the_formula(world_size):
    args = {"layers": 3, "feature_width": 24, "hidden": 8, "epochs": 2, "cost_model": COST}
    results = run("gnnbook.ch5_minibatch.pushpull:compare", world_size, args, deadline_s=240)
    runs = [[r[mode] for r in results] for mode in pp.MODES]
    owner = runs[0][0].owner
    ref = pp.reference(pp.build(feature_width=24, hidden=8, layers=3, num_parts=world_size, owner=owner))
    for mode, out in zip(pp.MODES, runs):
        assert all(torch.equal(o.owner, owner) for o in out)
        for o in out:
            assert torch.allclose(o.logits, ref["logits"][o.own], atol=1e-5), mode
            for got, want in zip(o.grads, ref["grads"]):
                for g, w in zip(got, want):
                    assert torch.allclose(g, w, atol=1e-5), (mode, float((g - w).abs().max()))
            ops = o.summary["by_op"]
            assert o.dependency_wire[0] == ops["all_to_all"]["expected_sent"], (mode, o.rank)  # payload + headers
            assert o.gradient_wire[0] == ops["all_reduce"]["expected_sent"]
            modelled = o.modelled
            assert modelled["hybrid"] <= min(modelled["push"], modelled["pull"]) * (1 + 1e-12)
        payload = sum(o.summary["by_op"]["all_to_all"]["payload_sent"] for o in out)
        formula = sum(o.formula["forward_received"] + o.formula["backward_sent"] for o in out)
        assert payload == formula, mode
        if mode == "push":
            assert all(sum(o.redundant_rows) == 0 for o in out)
            assert all(o.received_rows == [o.halo] * 3 for o in out)
        if mode == "pull":
            assert all(o.formula["backward_sent"] == 0 and o.received_rows[1:] == [0, 0] for o in out)
    hybrid = runs[2]
    assert any(sum(o.redundant_rows) > 0 for o in hybrid)          # this cost model mixes the two
    assert any(0 < o.received_rows[2] for o in hybrid)


def test_an_emulated_link_delays_every_mode_by_the_bytes_it_receives():
    beta = 2e-7                                                           # 5 MB/s: tens of ms per epoch
    args = {"layers": 2, "feature_width": 24, "hidden": 8, "epochs": 3, "emulate_link": True,
            "cost_model": {**COST, "compute_s_per_row": COST["compute_s_per_row"][:2], "link_s_per_byte": beta}}
    results = run("gnnbook.ch5_minibatch.pushpull:compare", 2, args, deadline_s=240)
    for mode in pp.MODES:
        for o in (r[mode] for r in results):
            received = o.dependency_wire[1]                            # measured on the sockets, epoch 1
            # 3 exchanges (2 layers forward, 1 back), one message each way with the one peer: the link
            # carries all but the peer's ready-to-receive notices for this rank's own 3 messages
            link_bytes = received - 3 * PREAMBLE_BYTES
            assert o.link_s_per_epoch == pytest.approx(link_bytes * beta, rel=1e-9), (mode, o.rank)
            assert min(o.epoch_s) >= o.link_s_per_epoch             # the receiver slept at least that long
    with pytest.raises(ValueError, match="link_slowdown must be >= 1"):
        pp.compare(["push"], link_slowdown=0.5)


def test_pull_recomputes_more_with_layers_and_push_moves_layers_times_hidden():
    redundant, pushed = [], []
    for layers in (1, 2, 3):
        problem = pp.build(feature_width=16, hidden=8, layers=layers, num_parts=2, partition_by="random")
        pull, push = pp.choose(problem, 0, "pull"), pp.choose(problem, 0, "push")
        redundant.append(sum(pp.redundant_rows(pull)))
        pushed.append(sum(pp.formula_bytes(problem, push).values()))
        halo = len(pp.remote_levels(problem, 0)[-1])
    assert redundant[0] == 0 < redundant[1] < redundant[2]
    assert pushed[1] - pushed[0] == pushed[2] - pushed[1] == halo * 2 * 4 * 8     # one layer: 8 floats each way


def _tiny() -> pp.Problem:
    # a ring of 10 nodes with chords, two machines, three layers
    src = [i for i in range(10)] + [(i + 1) % 10 for i in range(10)] + [0, 5, 2, 7] + list(range(10))
    dst = [(i + 1) % 10 for i in range(10)] + [i for i in range(10)] + [5, 0, 7, 2] + list(range(10))
    order = np.lexsort((src, dst))
    src, dst = np.array(src)[order], np.array(dst)[order]
    indptr = torch.from_numpy(np.searchsorted(dst, np.arange(11))).long()
    gen = torch.Generator().manual_seed(0)
    weights = [(torch.randn(4, 3, generator=gen), torch.zeros(3)), (torch.randn(3, 3, generator=gen), torch.zeros(3)),
               (torch.randn(3, 2, generator=gen), torch.zeros(2))]
    return pp.Problem(indptr, torch.from_numpy(src).long(), torch.randn(10, 4, generator=gen), torch.zeros(10).long(),
                      torch.ones(10, dtype=torch.bool), torch.tensor([0, 0, 0, 1, 1, 1, 1, 0, 1, 1]), weights)


def _cheapest_by_enumeration(problem, rank, cost_model):
    levels = pp.remote_levels(problem, rank)
    halo = set(levels[-1].tolist())
    candidates = [(int(u), l) for l in range(1, problem.layers) for u in levels[l]]
    best = float("inf")
    for bits in itertools.product([0, 1], repeat=len(candidates)):
        computed = {c for c, b in zip(candidates, bits) if b}
        present = {(u, l) for l in range(problem.layers) for u in halo} | computed
        for u, l in computed:
            for w in problem.indices[problem.indptr[u]:problem.indptr[u + 1]].tolist():
                if problem.owner[w] != rank:
                    present.add((w, l - 1))
        plan = pp.Plan(rank, torch.nonzero(problem.owner == rank).flatten(),
                       [torch.tensor(sorted(u for u, m in computed if m == l), dtype=torch.int64)
                        for l in range(problem.layers)],
                       [torch.tensor(sorted(u for u, m in present - computed if m == l), dtype=torch.int64)
                        for l in range(problem.layers)])
        best = min(best, pp.modelled_cost(problem, plan, cost_model))
    return best


@pytest.mark.parametrize("link_s_per_byte", [1e-9, 1e-7, 1e-5])   # all push, a mix, all pull
def test_the_minimum_cut_is_the_cheapest_plan(link_s_per_byte):
    problem = _tiny()
    cost_model = {"compute_s_per_row": [1e-6, 2e-6, 3e-6], "link_s_per_byte": link_s_per_byte}
    for rank in (0, 1):
        levels = pp.remote_levels(problem, rank)
        assert sum(len(levels[l]) for l in range(1, 3)) <= 14            # small enough to enumerate
        hybrid = pp.choose(problem, rank, "hybrid", cost_model)
        assert hybrid.modelled["cost"] == pytest.approx(_cheapest_by_enumeration(problem, rank, cost_model), rel=1e-5)
        pp._mean_matrix(problem, torch.cat([hybrid.own, hybrid.computed[1]]), hybrid.rows(0))   # the plan is closed
        pp._mean_matrix(problem, torch.cat([hybrid.own, hybrid.computed[2]]), hybrid.rows(1))
        if link_s_per_byte == 1e-7:         # here the cheapest plan is neither pure strategy
            pure = min(pp.choose(problem, rank, m, cost_model).modelled["cost"] for m in ("push", "pull"))
            assert hybrid.modelled["cost"] < pure


def test_hybrid_is_never_dearer_over_links():
    problem = pp.build(feature_width=64, hidden=16, layers=3, num_parts=4, partition_by="random")
    for beta in (1e-10, 1e-8, 1e-7, 1e-6, 1e-4):
        cost_model = {"compute_s_per_row": [3e-6, 3e-6, 3e-6], "link_s_per_byte": beta}
        costs = {m: pp.choose(problem, 1, m, cost_model).modelled["cost"] for m in pp.MODES}
        assert costs["hybrid"] <= min(costs["push"], costs["pull"]), (beta, costs)


def test_bad_input_is_named():
    problem = pp.build(layers=2, num_parts=2, partition_by="random")
    with pytest.raises(ValueError, match="no 'link_s_per_byte'"):
        pp.choose(problem, 0, "hybrid", {"compute_s_per_row": [1e-6, 1e-6]})
    with pytest.raises(ValueError, match="no 'compute_s_per_row'"):
        pp.check_cost_model({"link_s_per_byte": 1e-9}, 2)
    with pytest.raises(ValueError, match="needs 2 positive costs"):
        pp.check_cost_model({"compute_s_per_row": [1e-6], "link_s_per_byte": 1e-9}, 2)
    with pytest.raises(ValueError, match="unknown mode 'gather'"):
        pp.choose(problem, 0, "gather")
    with pytest.raises(ValueError, match="unknown mode 'gather'"):
        pp.compare(["push", "gather"])
    with pytest.raises(ValueError, match="needs a cost model"):
        pp.choose(problem, 0, "hybrid")
    with pytest.raises(ValueError, match="unknown link 'carrier pigeon'"):
        pp.link_cost("carrier pigeon")
    with pytest.raises(ValueError, match="num_parts > nodes"):
        pp.build(num_parts=5000)
    with pytest.raises(ValueError, match="layers must be >= 1"):
        pp.build(layers=0)
    with pytest.raises(ValueError, match="unknown partition 'chunks'"):
        pp.build(partition_by="chunks")
