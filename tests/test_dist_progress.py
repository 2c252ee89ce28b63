"""A distributed job's epochs reach the launching process as a bar (issue 23, item 6)."""
import threading
import time

from gnnbook.distributed import LocalCluster, TrainConfig
from gnnbook.distributed.partition_files import partition_dataset
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

    writer = threading.Thread(target=trainer)
    with EpochProgress(log, epochs=3, deadline_s=60, enabled=False, poll_s=0.05) as progress:
        writer.start()
        writer.join()
        time.sleep(0.2)
    assert [(e["epoch"], e["val_acc"]) for e in progress.epochs_seen] == [(0, 0.3), (1, 0.7)]
    assert parse_epoch_line("epoch 2: loss nan val 0.100 test 0.100 1.00s")["loss"] != 0


def test_a_real_jobs_epochs_show_in_the_launcher(tmp_path, capfd):
    part_config = partition_dataset("cora", 2, "metis", tmp_path / "cora2")
    with LocalCluster(part_config, num_trainers=1, deadline_s=120) as cluster:
        result = cluster.train(TrainConfig(epochs=3, batch_size=32), progress=True)
    err = capfd.readouterr().err
    assert "3/3" in err and "deadline in" in err, err[-1000:]
    last = result["history"][-1]       # the bar's last numbers are the trainer's
    assert f"val={last['val_acc']:.3f}" in err and f"loss={last['loss']:.3f}" in err, err[-1000:]
