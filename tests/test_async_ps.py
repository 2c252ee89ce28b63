"""gnnbook.ch6_fullgraph.async_ps: full-graph GCN through a parameter server, with and without a per-epoch
barrier (real processes: a server and two workers on Cora, a few seconds each)."""
from __future__ import annotations

import pytest

from gnnbook.base.launch import run
from gnnbook.ch6_fullgraph.async_ps import straggler_schedule

TRAIN = "gnnbook.ch6_fullgraph.async_ps:train"


def test_the_straggler_slows_each_worker_in_turn():
    assert straggler_schedule(3, 7, seed=0) == [0, 1, 2, 0, 1, 2, 0] and straggler_schedule(2, 3, seed=1) == [1, 0, 1]


def test_the_barrier_uses_current_weights_and_rows_one_epoch_old():
    server, *workers = run(TRAIN, 3, dict(mode="sync", epochs=12, delay_s=0.0), deadline_s=120)
    assert server.updates == 12 and set(server.weight_lag) == {0}
    for w in workers:
        assert w.halo_lag == [1] * 12 and len(w.epoch_s) == 12
    assert server.curve.best_val > 0.5      # learns: the K gradients summed, one step per epoch


@pytest.mark.parametrize("staleness", [0, 2])
def test_without_the_barrier_every_push_is_an_update_and_rows_stay_within_the_bound(staleness):
    # a worker answered at most `staleness` iterations ahead of the slowest never uses rows older than staleness + 1
    server, *workers = run(TRAIN, 3, dict(mode="async", staleness=staleness, epochs=12, delay_s=0.01), deadline_s=120)
    assert server.updates == 2 * 12 and len(server.weight_lag) == 24
    assert max(server.weight_lag) >= 1       # some gradient was computed on weights another push had changed
    for w in workers:
        assert max(w.halo_lag) <= staleness + 1 and len(w.losses) == 12
    assert sum(w.slowed for w in workers) == 12     # one worker slowed per iteration


def test_bad_options_are_refused_in_every_rank():
    with pytest.raises(Exception, match="unknown mode"):
        run(TRAIN, 3, dict(mode="ssp"), deadline_s=60)
