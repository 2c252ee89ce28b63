"""Collective deadlocks (5.5.2) on real gloo processes: uneven DDP inputs hang without Join and
finish with it or with truncation (weights equal the one-process replay exactly); mismatched and
missing collectives end with a named error, never a silent hang."""
import time

import pytest
import torch

from gnnbook.base.launch import ProcessFailed, run, run_sequence
from gnnbook.comm.uneven import replay_uneven

UNEVEN = [5, 3]


def test_join_and_truncate_finish_and_equal_the_replay():
    runs = run_sequence([("gnnbook.comm.uneven:train_uneven", {"steps": UNEVEN, "mode": mode})
                         for mode in ("join", "truncate")] +
                        [("gnnbook.comm.uneven:train_uneven", {"steps": [4, 4], "mode": "plain"})], 2)
    for out, (steps, mode) in zip(runs, [(UNEVEN, "join"), (UNEVEN, "truncate"), ([4, 4], "plain")]):
        expected = replay_uneven(steps, mode)
        for rank in out:
            assert torch.allclose(rank.weight, expected["weight"], atol=1e-6), mode
            assert torch.allclose(rank.bias, expected["bias"], atol=1e-6), mode
    assert [r.steps_run for r in runs[0]] == UNEVEN          # Join: every rank used all its data
    assert [r.steps_run for r in runs[1]] == [3, 3]          # truncated to the smallest count
    # Join's extra steps change the model: it is not the truncated run
    assert not torch.allclose(runs[0][0].weight, runs[1][0].weight)


def test_uneven_plain_ddp_hangs_until_the_deadline_which_names_it():
    deadline = 20
    start = time.monotonic()
    with pytest.raises(ProcessFailed, match=f"deadline of {deadline} s passed; still running: rank0") as err:
        run("gnnbook.comm.uneven:train_uneven", 2, {"steps": UNEVEN, "mode": "plain"}, deadline_s=deadline)
    assert time.monotonic() - start < deadline + 20  # stopped near its deadline, everything killed
    # rank 0's stacks (dumped before the kill) show where it waits: the gradient all-reduce in backward
    assert "backward" in str(err.value), str(err.value)[-2000:]


def test_mismatched_collective_order_aborts_and_debug_mode_names_both_calls():
    with pytest.raises(ProcessFailed, match="EnforceNotMet|SIGABRT"):
        run("gnnbook.comm.uneven:mismatched_order", 2, deadline_s=60)
    with pytest.raises(ProcessFailed, match="Detected mismatch between collectives"):
        run("gnnbook.comm.uneven:mismatched_order", 2, deadline_s=60,
            env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})


def test_a_missing_collective_times_out_with_the_groups_timeout():
    out = run("gnnbook.comm.uneven:missing_collective", 2, {"timeout_s": 2.0}, deadline_s=60)
    assert "Timed out" in out[0].error
    assert 1.9 < out[0].waited_s < 10
    assert out[1].error is None


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown mode 'async'; choose one of plain, join, truncate"):
        replay_uneven([2, 2], "async")
    with pytest.raises(ValueError, match="does not finish"):
        replay_uneven([3, 2], "plain")
    with pytest.raises(ValueError, match="at least one minibatch"):
        replay_uneven([0, 2], "join")
