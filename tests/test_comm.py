"""The byte counter counts what the calls move; the cost model is the ring formula."""
from __future__ import annotations

import pytest
import torch

from gnnbook.comm import LINKS, allreduce_time_s, ring_allreduce_bytes
from gnnbook.parallel import run


def count_every_op() -> dict:
    """Runs in each rank (loaded from this file by path)."""
    import torch.distributed as dist

    from gnnbook.comm import Comm

    comm = Comm()
    rank, n = comm.rank, comm.world_size
    t = torch.full((12,), float(rank + 1))
    comm.all_reduce(t)
    full = torch.empty(4 * n)
    comm.all_gather_into_tensor(full, torch.full((4,), float(rank)))
    shard = torch.empty(4)
    comm.reduce_scatter_tensor(shard, torch.ones(4 * n))
    splits = [rank + 1] * n                     # rank r sends r+1 rows to everyone
    out_splits = [s + 1 for s in range(n)]       # and receives s+1 rows from rank s
    got = torch.empty(sum(out_splits), 2)
    comm.all_to_all_single(got, torch.full((sum(splits), 2), float(rank)), out_splits, splits)
    if rank == 0:
        comm.send(torch.ones(10), 1)
    elif rank == 1:
        comm.recv(torch.empty(10), 0)
    dist.barrier()
    return {"sum": t, "gathered": full, "shard": shard, "got": got, "comm": comm.summary()}


def test_counter_counts_each_call_in_real_ranks():
    out = run(f"{__file__}:count_every_op", 3, deadline_s=60)
    n = 3
    for rank, r in enumerate(out):
        assert torch.equal(r["sum"], torch.full((12,), 6.0))
        assert torch.equal(r["gathered"], torch.arange(n).repeat_interleave(4).float())
        assert torch.equal(r["shard"], torch.full((4,), 3.0))
        ops = r["comm"]["by_op"]
        assert ops["all_reduce"]["sent"] == pytest.approx(2 * (n - 1) / n * 48)
        assert ops["all_gather"]["received"] == (n - 1) * 16
        assert ops["reduce_scatter"]["sent"] == (n - 1) * 16
        # all-to-all counts exactly: rows to the other ranks x 2 floats x 4 bytes
        assert ops["all_to_all"]["sent"] == (rank + 1) * (n - 1) * 8
        assert ops["all_to_all"]["received"] == sum(s + 1 for s in range(n) if s != rank) * 8
    assert out[0]["comm"]["by_op"]["send"]["sent"] == 40
    assert out[1]["comm"]["by_op"]["recv"]["received"] == 40
    assert "send" not in out[2]["comm"]["by_op"]


def test_ring_formula_and_cost_model():
    assert ring_allreduce_bytes(1000, 2) == 1000
    assert ring_allreduce_bytes(1000, 8) == 1750
    link = {"bandwidth": 1e9, "latency": 0.0}
    # without latency the model is the ring volume over the bandwidth
    assert allreduce_time_s(4e8, 8, link) == pytest.approx(ring_allreduce_bytes(4e8, 8) / 1e9)
    # faster links are faster; latency adds 2(N-1) hops
    times = [allreduce_time_s(4e8, 8, name) for name in LINKS]
    assert times == sorted(times)
    assert allreduce_time_s(0, 4, {"bandwidth": 1.0, "latency": 1e-3}) == pytest.approx(6e-3)
