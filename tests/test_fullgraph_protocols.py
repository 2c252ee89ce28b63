"""6.2.2, 6.2.3 and 6.3 on real processes: pre-aggregation sends one row per (boundary target,
source part); cd-r with r = 1 and BNS with p = 1 equal synchronous training; bytes measured =
the formula; PipeGCN's rows and gradients are exactly one epoch stale."""
import pytest
import torch

from gnnbook.data import load_dataset
from gnnbook.ch6_fullgraph.protocols import (boundary_pairs, check_options, exchange_bytes_formula, preagg_graph,
                                         run_protocol)
from gnnbook.ch6_fullgraph.stale import run_stale, staleness, time_modes
from gnnbook.ch6_fullgraph.subgraph import prepare
from gnnbook.comm.gloo_bytes import PREAMBLE_BYTES
from gnnbook.base.launch import run_sequence
from gnnbook.ch6_fullgraph.partitioners import partition

EPOCHS, HIDDEN = 5, 16


def test_preaggregation_rows_are_the_boundary_targets_and_sum_to_the_full_aggregate():
    g = prepare(load_dataset("cora"), "gcn")
    k = 3
    a = partition(g, k, "random")
    pairs, cut, halo = boundary_pairs(g, a)
    parts = [preagg_graph(g, a, r) for r in range(k)]
    assert [p.scatter.shape[1] for p in parts] == pairs                  # rows received = boundary pairs
    assert sum(p.partial.shape[0] for p in parts) == sum(pairs) < cut     # fewer rows than cut edges
    assert sum(pairs) == sum(halo)          # undirected graph: the same (vertex, other part) pairs, read backwards
    # the full aggregate A h, assembled from own edges plus the peers' pre-summed rows
    h = torch.randn(g.num_nodes(), 4, generator=torch.Generator().manual_seed(0))
    src, dst = g.edges()
    w = (g.out_degrees()[src].float() * g.in_degrees()[dst].float()).rsqrt()
    full = torch.zeros_like(h).index_add_(0, dst, h[src] * w[:, None])
    owned = [torch.nonzero(a == r).flatten() for r in range(k)]
    sent = [torch.sparse.mm(p.partial, h[o]) for p, o in zip(parts, owned)]
    for r in range(k):
        rows = torch.cat([sent[j][parts[j].send_peers == r] for j in range(k)])     # by peer, then target
        assert torch.equal(torch.cat([parts[j].send_targets[parts[j].send_peers == r] for j in range(k)]),
                           parts[r].recv_targets)
        out = torch.sparse.mm(parts[r].local, h[owned[r]]) + torch.sparse.mm(parts[r].scatter, rows)
        assert torch.allclose(out, full[owned[r]], atol=1e-5)


@pytest.mark.timeout(300)
def test_delay_one_and_sampling_one_equal_synchronous_and_bytes_match():
    configs = [("sync", 1, 1.0), ("preagg", 1, 1.0), ("cdr", 1, 1.0), ("bns", 1, 1.0), ("cdr", 3, 1.0),
               ("bns", 1, 0.3)]
    jobs = [("gnnbook.ch6_fullgraph.protocols:train", dict(dataset="cora", protocol=pr, r=r, p=p, epochs=EPOCHS,
                                                        hidden=HIDDEN, eval_every=EPOCHS)) for pr, r, p in configs]
    outs = dict(zip(configs, run_sequence(jobs, 2, deadline_s=240)))
    sync, pre, cd1, bns1, cd3, bns3 = outs.values()
    def same(a, b, tol):      # bit for bit on the same partition (METIS may number the parts the other way)
        if torch.equal(a[0].assignment, b[0].assignment) and tol == 0:
            return a[0].losses == b[0].losses
        return max(abs(x - y) for x, y in zip(a[0].losses, b[0].losses)) < max(tol, 1e-6)

    assert same(bns1, sync, 0)                   # p = 1: the same computation
    assert same(cd1, pre, 0)                     # r = 1: plain pre-aggregation
    assert same(cd1, sync, 1e-5)                 # pre-summing only reorders the float additions
    g = prepare(load_dataset("cora"), "gcn")
    for out in outs.values():
        pairs, _, halo = boundary_pairs(g, out[0].assignment)
        if out is pre:
            assert sum(o.rows_sent[0] for o in out) == 2 * sum(pairs)      # 2 layers, one row per pair
        if out is sync:
            assert sum(o.rows_sent[0] for o in out) == 2 * sum(halo)
        for e in range(EPOCHS):
            rows = [o.rows_sent[e] for o in out]
            # rank r sends its forward rows and, backward, the gradients of the rows it received
            payloads = [(rows[r] + rows[1 - r]) * HIDDEN * 4 for r in range(2)]
            for o, payload in zip(out, payloads):
                assert o.exchange_wire_sent[e] == payload + 4 * 3 * PREAMBLE_BYTES, (o.protocol, e)
            assert sum(payloads) == exchange_bytes_formula(sum(rows) // 2, HIDDEN)      # rows per layer
    # the delayed and the sampled exchanges send fewer rows after the first epoch
    assert all(sum(o.rows_sent[e] for o in cd3) < 0.5 * sum(o.rows_sent[0] for o in cd3)
               for e in range(1, EPOCHS))
    assert all(sum(o.rows_sent[e] for o in bns3) < 0.5 * sum(o.rows_sent[0] for o in sync)
               for e in range(EPOCHS))


@pytest.mark.timeout(300)
def test_pipegcn_is_exactly_one_epoch_stale_and_bytes_match():
    jobs = [("gnnbook.ch6_fullgraph.stale:train", dict(dataset="cora", mode=m, epochs=EPOCHS, record_epochs=EPOCHS,
                                                    hidden=HIDDEN, eval_every=EPOCHS)) for m in ("sync", "pipe")]
    sync, pipe = run_sequence(jobs, 2, deadline_s=240)
    assert staleness(sync)["embeddings"] == [0] * EPOCHS
    assert staleness(pipe) == {"embeddings": [0] + [1] * (EPOCHS - 1), "gradients": [-1] + [1] * (EPOCHS - 1)}
    assert pipe[0].losses[0] == sync[0].losses[0] and pipe[0].losses[1] != sync[0].losses[1]
    for out in (sync, pipe):
        for o in out:
            payload = EPOCHS * 2 * (o.halo_rows_sent + o.halo_rows_received) * HIDDEN * 4
            assert o.halo_payload_sent == payload
            # measured on the sockets over the run: halo (payload + gloo headers) + gradient all-reduce
            assert o.training_wire_sent == o.halo_expected_sent + o.all_reduce_expected
        assert o.halo_expected_sent - o.halo_payload_sent == EPOCHS * 4 * 3 * PREAMBLE_BYTES


@pytest.mark.timeout(300)
def test_timing_runs_alternate_and_each_starts_afresh():
    out = run_sequence([("gnnbook.ch6_fullgraph.stale:time_modes",
                         dict(dataset="cora", pairs=2, epochs=4, hidden=HIDDEN))],
                       2, deadline_s=240)[0]
    for o in out:
        assert o.modes == ["sync", "pipe", "sync", "pipe", "sync"]
        assert all(len(e) == 4 for e in o.epoch_s) and all(w >= 0 for w in o.wait_s + o.allreduce_s)
    losses = out[0].losses
    # every run starts from the same weights: the synchronous runs repeat bit for bit, PipeGCN leaves them at epoch 1
    assert losses[0] == losses[2] == losses[4] and losses[1] == losses[3]
    assert losses[1][0] == losses[0][0] and losses[1][1] != losses[0][1]
    with pytest.raises(ValueError, match="pairs >= 1"):
        time_modes(pairs=0)                   # checked before any process group is needed


def test_bad_input_is_named():
    for p in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"p must lie in \(0, 1\]"):
            run_protocol("cora", "bns", p=p)
    for r in (0, -2, 1.5):
        with pytest.raises(ValueError, match="r must be an integer >= 1"):
            run_protocol("cora", "cdr", r=r)
    with pytest.raises(ValueError, match="unknown protocol 'gossip'"):
        check_options("gossip")
    with pytest.raises(ValueError, match="num_parts must be at least 2"):
        run_protocol("cora", "sync", num_parts=1)
    with pytest.raises(ValueError, match="unknown mode 'async'"):
        run_stale("cora", "async")


@pytest.mark.timeout(300)
def test_sancus_bound_zero_is_synchronous_and_skips_stay_within_the_bound():
    from gnnbook.comm.gloo_bytes import all_reduce

    configs = [dict(protocol="sync"), dict(protocol="sancus", bound=0),
               dict(protocol="sancus", threshold=10.0, bound=2)]
    jobs = [("gnnbook.ch6_fullgraph.protocols:train",
             dict(dataset="cora", epochs=8, hidden=HIDDEN, eval_every=8, lr=0.05, **c)) for c in configs]
    sync, never, skipping = run_sequence(jobs, 2, deadline_s=240)
    if torch.equal(sync[0].assignment, never[0].assignment):
        assert never[0].losses == sync[0].losses
    assert max(abs(a - b) for a, b in zip(never[0].losses, sync[0].losses)) < 1e-6
    assert max(max(o.sancus_skips) for o in skipping) == 2     # a huge threshold: only the bound forces a send
    assert sum(sum(o.rows_sent) for o in skipping) < sum(sum(o.rows_sent) for o in sync)
    for out in (never, skipping):
        for e in range(8):
            rows = [o.rows_sent[e] for o in out]
            for r, o in enumerate(out):
                flags = all_reduce(16, 8, 2, r).wire_sent                   # the send/skip decisions, 2 x int64
                payload = (rows[r] + rows[1 - r]) * HIDDEN * 4
                assert o.exchange_wire_sent[e] == payload + 4 * 3 * PREAMBLE_BYTES + 2 * flags


def test_sancus_bad_input_is_named():
    with pytest.raises(ValueError, match="threshold must be >= 0"):
        run_protocol("cora", "sancus", threshold=-0.1)
    with pytest.raises(ValueError, match="staleness bound must be an integer >= 0"):
        run_protocol("cora", "sancus", bound=-1)
