"""Every parallel form, run in >= 2 real processes, equals the one-process result;
the launcher fails fast, names the failed rank and leaves nothing running."""
from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest
import torch

from gnnbook.comm.collectives import wire_vs_formula
from gnnbook.base.launch import ProcessFailed, run, run_sequence
from gnnbook.ch3_parallel.expert_parallel import moe_single
from gnnbook.ch3_parallel.pipeline import bubble_formula, bubble_fractions
from gnnbook.ch3_parallel.sharded import unsharded_state_bytes
from gnnbook.ch3_parallel.tensor_parallel import mlp_single
from gnnbook.ch3_parallel.toy import max_abs_diff, train_single

SIZES = [8, 24, 24, 16, 4]
ARGS = {"sizes": SIZES, "n": 48, "steps": 4}


def no_children_left() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.fixture(scope="module")
def three_ranks():
    """One launch of 3 ranks for the forms that need no special world size."""
    jobs = [
        ("gnnbook.ch3_parallel.data_parallel:train_allreduce", ARGS),
        ("gnnbook.ch3_parallel.data_parallel:train_parameter_server", ARGS),
        ("gnnbook.ch3_parallel.model_parallel:train_model_parallel", ARGS),
        ("gnnbook.ch3_parallel.tensor_parallel:mlp_tensor_parallel", {"d": 16, "hidden": 48, "n": 8}),
        ("gnnbook.ch3_parallel.expert_parallel:moe_expert_parallel", {"tokens": 32, "d": 8, "hidden": 16}),
        ("gnnbook.ch3_parallel.sharded:train_sharded", ARGS),
    ]
    names = ["ddp", "ps", "mp", "tp", "moe", "fsdp"]
    return dict(zip(names, run_sequence(jobs, 3, deadline_s=120)))


def test_run_returns_each_ranks_result():
    out = run("gnnbook.base.worker:rank_and_size", 2, deadline_s=60)
    assert out == [{"rank": 0, "world_size": 2}, {"rank": 1, "world_size": 2}]


def test_ranks_can_join_by_themselves_from_the_environment():
    out = run("gnnbook.base.worker:env_rendezvous", 2, init_dist=False, deadline_s=60)
    assert out == [{"rank": 0, "sum": 2}, {"rank": 1, "sum": 2}]


def test_bad_function_spec_is_a_clear_error():
    with pytest.raises(ValueError, match="module:function"):
        run("no_colon_here", 2)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run("/nonexistent/file.py:f", 2)
    with pytest.raises(TypeError):
        run("gnnbook.base.worker:rank_and_size", 2, {"x": object()})


def test_data_parallel_allreduce_and_parameter_server_equal_one_process(three_ranks):
    ref = train_single(**ARGS)["params"]
    for rank_result in three_ranks["ddp"] + three_ranks["ps"]:
        assert max_abs_diff(rank_result.params, ref) < 1e-5
    param_bytes = three_ranks["ddp"][0].param_bytes
    # ring all-reduce volume: 2(N-1)/N of the gradient per step
    assert three_ranks["ddp"][0].measured_steps == 2
    assert three_ranks["ddp"][0].comm["formula_sent"] == pytest.approx(2 * 2 * 2 / 3 * param_bytes)
    # the server sends the weights to each of the 2 workers every step
    assert three_ranks["ps"][0].comm["formula_sent"] == 4 * 2 * param_bytes


@pytest.mark.parametrize("form", ["ddp", "ps", "mp", "tp", "moe", "fsdp"])
def test_measured_wire_bytes_are_the_calls_gloo_made(three_ranks, form):
    """The sockets carried exactly what the counted calls put there (gloo's model, headers
    included), and the formula is within gloo's headers of it."""
    for r in three_ranks[form]:
        c = r.comm
        assert (c["sent"], c["received"]) == (c["expected_sent"], c["expected_received"]), c
        assert wire_vs_formula(c)["agrees"] and wire_vs_formula(c, "received")["agrees"], wire_vs_formula(c)


def test_model_parallel_equals_one_process(three_ranks):
    params = [p for r in three_ranks["mp"] for p in r.params]
    assert max_abs_diff(params, train_single(**ARGS)["params"]) < 1e-5
    assert all(r.comm["sent"] > 0 for r in three_ranks["mp"])


def test_tensor_parallel_equals_unsplit_layer(three_ranks):
    ref = mlp_single(d=16, hidden=48, n=8)
    tp = three_ranks["tp"]
    for r in tp:
        assert torch.allclose(r.y, ref["y"], atol=1e-5)
        assert torch.allclose(r.grad_x, ref["grad_x"], atol=1e-6)
    assert torch.allclose(torch.cat([r.grad_A for r in tp], 1), ref["grad_A"], atol=1e-6)
    assert torch.allclose(torch.cat([r.grad_B for r in tp], 0), ref["grad_B"], atol=1e-6)


def test_expert_parallel_equals_single_process_moe(three_ranks):
    ref = moe_single(world_size=3, tokens=32, d=8, hidden=16)
    out = three_ranks["moe"]
    assert torch.allclose(torch.cat([r.y for r in out]), ref["y"], atol=1e-6)
    counts = torch.stack([r.send_counts for r in out])
    assert counts.sum() == 3 * 32 and (counts > 0).sum() >= 4  # tokens really went to several experts


def test_sharded_equals_one_process_adam_and_holds_a_third(three_ranks):
    ref = train_single(**ARGS, lr=0.01, optimizer="adam")["params"]
    full = sum(unsharded_state_bytes(SIZES, n=48).values())
    for r in three_ranks["fsdp"]:
        assert max_abs_diff(r.params, ref) < 1e-5
        assert 1 / 3 <= sum(r.held_bytes.values()) / full < 1 / 3 + 0.02


def test_pipeline_gradients_equal_one_process_and_bubble_is_reported():
    out = run("gnnbook.ch3_parallel.pipeline:run_pipeline", 2,
              {"width": 32, "layers_per_stage": 2, "batch": 64, "micro_batches": [1, 4], "repeats": 1, "lr": 0.05},
              deadline_s=90)
    ref = train_single(out[0].sizes, n=64, steps=1, lr=0.05)["params"]
    assert max_abs_diff([p for r in out for p in r.params], ref) < 1e-5
    bubbles = bubble_fractions(out)
    assert set(bubbles) == {1, 4}
    assert bubbles[4]["formula"] == bubble_formula(2, 4)
    assert all(0 <= b["measured"] < 1 for b in bubbles.values())


def test_pipeline_schedule_follows_gpipe_with_emulated_stages():
    """Sleeping stages need no CPU, so the schedule is checked even on a busy machine."""
    out = run("gnnbook.ch3_parallel.pipeline:run_pipeline", 2,
              {"width": 16, "layers_per_stage": 1, "batch": 64, "micro_batches": [1, 4], "repeats": 2,
               "emulated_s": 0.08},
              deadline_s=90)
    for m, b in bubble_fractions(out).items():
        assert abs(b["measured"] - bubble_formula(2, m)) < 0.15, (m, b)
        # the ping-pong's hand-off is real time, and it can only add to GPipe's bubble
        assert 0 < b["handoff_s"] < 0.05 and b["with_handoffs"] >= b["formula"], (m, b)


def test_staleness_bound_holds_and_all_modes_reach_the_target():
    jobs = [("gnnbook.ch3_parallel.sync:train_ssp",
             {"staleness": s, "straggler_s": 0.005, "compute_s": 0.0, "target_loss": 0.1})
            for s in (0, 2, None)]
    out = run_sequence(jobs, 3, deadline_s=120)
    for runs, s in zip(out, (0, 2, None)):
        server = runs[0]
        assert server.reached, f"staleness {s} did not reach the target loss"
        assert server.curve[-1, 1] <= 0.1
        if s is not None:
            # a worker is answered only within s clocks of the slowest; it may push once more
            assert max(server.clocks) - min(server.clocks) <= s + 1


@pytest.mark.parametrize("how", ["kill", "raise"])
def test_a_failed_rank_is_named_and_nothing_is_left(how):
    start = time.monotonic()
    with pytest.raises(ProcessFailed, match="rank1") as err:
        run("gnnbook.base.worker:fail_on_rank", 3, {"rank": 1, "how": how}, deadline_s=60)
    assert time.monotonic() - start < 30
    assert err.value.name == "rank1"
    assert not no_children_left()


def test_an_externally_killed_rank_is_named_and_nothing_is_left():
    """SIGKILL one rank from outside while the others wait in an all-reduce."""
    victims: list[int] = []

    def kill_rank2() -> None:
        end = time.monotonic() + 30
        while time.monotonic() < end and not victims:
            for child in psutil.Process().children(recursive=True):
                try:
                    if child.environ().get("RANK") == "2" and "gnnbook.base.worker" in " ".join(child.cmdline()):
                        time.sleep(3)  # let it get into the job
                        os.kill(child.pid, signal.SIGKILL)
                        victims.append(child.pid)
                        return
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            time.sleep(0.1)

    killer = threading.Thread(target=kill_rank2)
    killer.start()
    start = time.monotonic()
    with pytest.raises(ProcessFailed, match="rank2.*SIGKILL"):
        run("gnnbook.base.worker:fail_on_rank", 3, {"rank": 0, "how": "hang"}, deadline_s=60)
    killer.join()
    assert victims and time.monotonic() - start < 30
    assert not no_children_left()


def test_deadline_stops_a_hang():
    with pytest.raises(ProcessFailed, match="deadline"):
        run("gnnbook.base.worker:fail_on_rank", 2, {"rank": 1, "how": "hang"}, deadline_s=12)
    assert not no_children_left()


def test_a_rank_that_leaves_early_stops_the_job_after_the_peer_grace_not_at_the_deadline():
    """Rank 1 exits 0 at once; rank 0 waits for its message forever (issue 22, item 13)."""
    from gnnbook.base.launch import PEER_EXIT_GRACE_S

    start = time.monotonic()
    with pytest.raises(ProcessFailed, match="exited with code 0 but rank0 still ran"):
        run("gnnbook.base.worker:exit_early_or_wait", 2, deadline_s=240)
    assert time.monotonic() - start < PEER_EXIT_GRACE_S + 40, "waited for the deadline instead of the peer grace"
    assert not no_children_left()


def test_ranks_listen_on_loopback_only_with_gloo_pinned_to_it():
    out = run("gnnbook.base.worker:listening_sockets", 2, deadline_s=60)
    for rank in out:
        assert rank["gloo_ifname"] and rank["gloo_ifname"].startswith("lo")
        assert rank["listening"], "a gloo rank listens for its peers"
        assert all(ip.startswith("127.") or ip == "::1" for ip in rank["listening"]), rank["listening"]


def test_the_launchers_work_folder_is_removed_by_the_watchdog_when_the_launcher_is_killed(tmp_path):
    """SIGKILL the process that called run(): its gnnbook-run-* folder goes with the job."""
    import subprocess
    import sys

    script = ("import os, sys, tempfile; tempfile.tempdir = sys.argv[1]\n"
              "from gnnbook.base.launch import run\n"
              "run('gnnbook.base.worker:fail_on_rank', 2, {'rank': 1, 'how': 'hang'}, deadline_s=120)\n")
    launcher = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], start_new_session=True)
    end = time.monotonic() + 60
    while time.monotonic() < end and not list(tmp_path.glob("gnnbook-run-*/logs/rank1.log")):
        time.sleep(0.2)
    assert list(tmp_path.glob("gnnbook-run-*")), "the launcher made no work folder"
    time.sleep(2)
    launcher.kill()
    launcher.wait(10)
    end = time.monotonic() + 30
    while time.monotonic() < end and list(tmp_path.glob("gnnbook-run-*")):
        time.sleep(0.2)
    assert not list(tmp_path.glob("gnnbook-run-*")), "the work folder outlived its launcher"
