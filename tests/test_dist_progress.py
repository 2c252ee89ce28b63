"""A distributed job's epochs reach the launching process as a bar (issue 23, item 6), also when one job
trains several times (``TrainConfig.runs``)."""
import threading
import time

import pytest

from gnnbook.distributed import LocalCluster, TrainConfig
from gnnbook.distributed.partition_cache import partition_dataset
from gnnbook.distributed.progress import EpochProgress, parse_epoch_line


def test_the_bar_follows_a_log_written_while_it_runs(tmp_path):
    log = tmp_path / "logs" / "trainer-m0-r0.log"

    def trainer():            # what rank 0 prints, a line at a time, one cut in the middle
        log.parent.mkdir()
        with open(log, "w") as f:
            f.write("Initializing DGL...\nepoch 0: loss 1.946 val 0.300 test 0.310 0.50s\nepoch 1: loss 1.")
            f.flush()
            time.sleep(0.3)
            f.write("200 val 0.700 test 0.710 0.40s\n")
        time.sleep(0.3)
        log.write_text("epoch 0: loss 1.900 val 0.350 test 0.360 0.50s\n")    # restarted on fresh ports
        time.sleep(0.3)
        with open(log, "a") as f:
            f.write("epoch 1: loss 1.200 val 0.700 test 0.710 0.40s\n"
                    "run 1 epoch 0: loss 1.800 val 0.400 test 0.410 0.50s\n")   # the job's second run

    writer = threading.Thread(target=trainer)
    with EpochProgress(log, epochs=2, deadline_s=60, enabled=False, poll_s=0.05, runs=2) as progress:
        writer.start()
        writer.join()
        time.sleep(0.2)
        assert progress._bar.n == 3       # of 2 runs x 2 epochs
    assert ([(e["run"], e["epoch"], e["val_acc"]) for e in progress.epochs_seen]
            == [(0, 0, 0.3), (0, 1, 0.7), (1, 0, 0.4)])
    assert parse_epoch_line("epoch 2: loss nan val 0.100 test 0.100 1.00s")["loss"] != 0


def test_a_real_jobs_epochs_show_in_the_launcher(tmp_path, capfd):
    """A job of two runs (TrainConfig.runs): the bar counts both, and the result reports each run."""
    part_config = partition_dataset("cora", 2, "metis", tmp_path / "cora2")
    with LocalCluster(part_config, num_trainers=1, deadline_s=120) as cluster:
        result = cluster.train(TrainConfig(epochs=3, batch_size=32, seed=5, runs=2), progress=True)
    err = capfd.readouterr().err
    assert "6/6" in err and "deadline in" in err, err[-1000:]
    runs = result["runs"]
    assert [r["seed"] for r in runs] == [5, 6] and result["test_acc_per_seed"] == [r["test_acc"] for r in runs]
    assert result["test_acc"] == runs[0]["test_acc"] and len(result["history"]) == 3    # the first run's
    assert result["test_acc_mean"] == sum(result["test_acc_per_seed"]) / 2
    assert runs[0]["final_loss"] != runs[1]["final_loss"], "the second run trained a model of its own"
    last = runs[-1]       # the bar's last numbers are the trainer's
    assert f"val={last['final_val_acc']:.3f}" in err and f"loss={last['final_loss']:.3f}" in err, err[-1000:]


def test_runs_are_checked_before_a_job_starts(tmp_path):
    with pytest.raises(ValueError, match="runs must be >= 1"):
        TrainConfig(runs=0)
    with pytest.raises(ValueError, match="a checkpoint holds one run"):
        TrainConfig(runs=2, checkpoint_dir=str(tmp_path))
    assert TrainConfig.from_argv(["--runs", "3"]).runs == 3
