"""The byte counter reports what the sockets carried: for send/recv and every
collective, on 2 and 3 real gloo processes, measured bytes equal gloo's
algorithm to the byte and the textbook formula within gloo's stated headers."""
from __future__ import annotations

import pytest
import torch

from gnnbook.comm import gloo_bytes
from gnnbook.comm.collectives import LINKS, allreduce_time_s, ring_allreduce_bytes
from gnnbook.base.launch import run

FLOATS = 1001          # not divisible by 2 or 3


def every_op(floats: int) -> dict:
    """Runs in each rank (loaded from this file by path): every call in its own measured window."""
    from gnnbook.comm.collectives import Comm

    comm = Comm(measure_each=True)
    rank, n = comm.rank, comm.world_size
    t = torch.full((floats,), float(rank + 1))
    comm.all_reduce(t)
    full = torch.empty(floats * n)
    comm.all_gather_into_tensor(full, torch.full((floats,), float(rank)))
    shard = torch.empty(floats)
    comm.reduce_scatter_tensor(shard, torch.ones(floats * n))
    b = torch.full((floats,), float(rank))
    comm.broadcast(b, 0)
    splits = [rank + 1] * n                      # rank r sends r+1 rows to everyone
    out_splits = [s + 1 for s in range(n)]       # and receives s+1 rows from rank s
    got = torch.empty(sum(out_splits), 3)
    comm.all_to_all_single(got, torch.full((sum(splits), 3), float(rank)), out_splits, splits)
    comm.barrier()
    with comm.window("send/recv"):               # every rank enters; 0 sends to 1
        if rank == 0:
            comm.send(torch.ones(floats), 1)
        elif rank == 1:
            comm.recv(torch.empty(floats), 0)
    return {"sum": t, "gathered": full, "shard": shard, "broadcast": b, "got": got, "comm": comm.summary()}


@pytest.mark.parametrize("n", [2, 3])
def test_measured_bytes_match_gloo_and_the_formula(n):
    out = run(f"{__file__}:every_op", n, {"floats": FLOATS}, deadline_s=90)
    size = 4 * FLOATS
    for rank, r in enumerate(out):
        # the collectives did their job
        assert torch.equal(r["sum"], torch.full((FLOATS,), n * (n + 1) / 2))
        assert torch.equal(r["gathered"], torch.arange(n).repeat_interleave(FLOATS).float())
        assert torch.equal(r["shard"], torch.full((FLOATS,), float(n)))
        assert torch.equal(r["broadcast"], torch.zeros(FLOATS))
        ops = r["comm"]["by_op"]
        for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier"):
            row = ops[op]
            # the kernel's count equals gloo's algorithm, headers included, to the byte
            assert (row["sent"], row["received"]) == (row["expected_sent"], row["expected_received"]), (rank, op, row)
            # and the formula within the stated overhead: 48 B headers x (2 per message sent + 1 per received)
            headers = gloo_bytes.PREAMBLE_BYTES * (2 * row["messages_sent"] + row["messages_received"])
            rounding = 4 * n * 4 if op in ("all_reduce", "reduce_scatter") else 0   # gloo's ring segments, whole floats
            assert abs(row["sent"] - headers - row["formula_sent"]) <= rounding, (rank, op, row)
        assert ops["all_reduce"]["formula_sent"] == pytest.approx(2 * (n - 1) / n * size)
        assert ops["all_gather"]["formula_received"] == (n - 1) * size
        # all-to-all is exact: rows to the other ranks x 3 floats x 4 bytes
        assert ops["all_to_all"]["formula_sent"] == (rank + 1) * (n - 1) * 12
        assert ops["all_to_all"]["formula_received"] == sum(s + 1 for s in range(n) if s != rank) * 12
    # send/recv: the payload plus 96 B of headers at the sender, 48 B at the receiver
    assert out[0]["comm"]["windows"]["send/recv"] == [size + 96, 48]
    assert out[1]["comm"]["windows"]["send/recv"] == [48, size + 96]
    assert all(r["comm"]["windows"]["send/recv"] == [0, 0] for r in out[2:])
    # totals since construction are the sum of the windows (nothing else crossed the sockets)
    for r in out:
        c = r["comm"]
        assert c["sent"] == (sum(row["sent"] for row in c["by_op"].values() if "sent" in row)
                             + c["windows"]["send/recv"][0])


def test_gloo_model_and_ring_formula():
    for n in (2, 3, 4):
        for size in (4, 4004, 40_000):
            vols = [gloo_bytes.all_reduce(size, 4, n, r) for r in range(n)]
            assert sum(v.sent for v in vols) == sum(v.received for v in vols)         # every byte sent is received
            assert sum(v.sent for v in vols) == 2 * (n - 1) * size                    # each chunk moves 2(N-1) times
    assert ring_allreduce_bytes(1000, 2) == 1000
    assert ring_allreduce_bytes(1000, 8) == 1750


def test_cost_model():
    link = {"bandwidth": 1e9, "latency": 0.0}
    # without latency the model is the ring volume over the bandwidth
    assert allreduce_time_s(4e8, 8, link) == pytest.approx(ring_allreduce_bytes(4e8, 8) / 1e9)
    # faster links are faster; latency adds 2(N-1) hops
    times = [allreduce_time_s(4e8, 8, name) for name in LINKS]
    assert times == sorted(times)
    assert allreduce_time_s(0, 4, {"bandwidth": 1.0, "latency": 1e-3}) == pytest.approx(6e-3)
