"""All-reduce from send/recv (5.5.1): direct, binomial tree and ring sum exactly like gloo, on
2, 3 and 4 real processes, and every byte their sockets carried is one of their own messages; message fusion:
split all-reduces carry the fused payload plus gloo's headers per message."""
import pytest

from gnnbook.base.launch import run
from gnnbook.comm import gloo_bytes
from gnnbook.comm.algorithms import ALGORITHMS, _children, _parent, bytes_sent_formula

SIZES = [1001, 30_000]   # not divisible by 3 or 4


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_each_algorithm_equals_gloo_and_its_payload_is_the_formula(world_size):
    jobs = [["gnnbook.course.grading.lab03_collectives:check_all_reduce",
             {"impl": f"gnnbook.comm.algorithms:{name}_all_reduce", "sizes": SIZES}] for name in ALGORITHMS]
    out = run("gnnbook.base.worker:sequence", world_size, {"jobs": jobs}, deadline_s=180)
    for i, name in enumerate(ALGORITHMS):
        for rank in range(world_size):
            for row in out[rank][i]:
                where = f"{name} N={world_size} rank {rank} size {row['size']}"
                assert row["max_error"] < 1e-4, where
                assert row["ops"] == ["recv", "send"], where
                assert row["wire_sent"] == row["explained_sent"], where          # measured = own messages + headers
                assert row["wire_received"] == row["explained_received"], where
                slack = 2 * (world_size - 1) * 4 if name == "ring" else 0       # ring chunks differ by one float
                assert abs(row["sent"] - bytes_sent_formula(name, row["bytes"], world_size, rank)) <= slack, where


def test_the_binomial_tree_spans_every_rank_once():
    for n in range(1, 17):
        edges = [(parent, child) for parent in range(n) for child in _children(parent, n)]
        assert sorted(child for _, child in edges) == list(range(1, n))
        assert all(_parent(child) == parent for parent, child in edges)


def test_fusion_splits_carry_the_fused_payload_plus_headers_per_message():
    out = run("gnnbook.comm.algorithms:fusion_seconds", 2, {"num_tensors": [1, 8], "total_floats": 800,
                                                                "repeats": 3}, deadline_s=60)
    for rank, o in enumerate(out):
        assert o.num_tensors == [1, 8] and len(o.seconds) == 2 and min(o.seconds) > 0
        fused, split = gloo_bytes.all_reduce(800 * 4, 4, 2, rank), gloo_bytes.all_reduce(100 * 4, 4, 2, rank)
        assert 8 * split.sent == fused.sent                             # the same payload either way
        assert o.wire_sent == [fused.wire_sent, 8 * split.wire_sent]  # measured on the sockets
        headers = gloo_bytes.PREAMBLE_BYTES * (2 * (8 * split.messages_sent - fused.messages_sent)
                                               + 8 * split.messages_received - fused.messages_received)
        assert o.wire_sent[1] - o.wire_sent[0] == headers > 0     # splitting adds headers, not payload


def test_unknown_algorithms_are_refused():
    with pytest.raises(ValueError, match="unknown algorithm 'star'; choose one of direct, tree, ring"):
        bytes_sent_formula("star", 100, 2, 0)
