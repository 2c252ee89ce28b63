"""A partition is opened once (issue 19, item 3): in one ``dist-train`` every
process (the launching one, each server, each trainer) reads the partition
config at most once through gnnbook's code, and the single-process baseline
builds the whole graph once for all its seeds.

Every ``open`` of the config is counted by an
audit hook (``sys.addaudithook``) that a ``sitecustomize`` installs in every
process: the launching process has it on PYTHONPATH, and the launcher's own
sitecustomize (``gnnbook/distributed/_site``) runs it in the servers and
trainers.  Each open is charged to the code that asked for it: gnnbook's or
DGL's (DGL's own readers, which servers use, are not gnnbook's to change).
One real job on Cora (2 machines x 1 trainer, 1 epoch, with the baseline):
about 20 s (70 s on a loaded 2-core machine)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import gnnbook
from gnnbook.distributed import baseline
from gnnbook.distributed.baseline import train_single_process, whole_graph
from gnnbook.distributed.config import TrainConfig
from gnnbook.distributed.partition_files import open_partition
from gnnbook.distributed.partition_cache import partition_dataset

COUNTER = '''
import os, sys

_WATCHED = os.path.realpath(os.environ["READS_WATCHED"])
_NAME = os.path.basename(_WATCHED)
_LOG = os.environ["READS_LOG_DIR"]
_GNNBOOK, _DGL = os.environ["READS_GNNBOOK_DIR"], os.environ["READS_DGL_DIR"]


def _owner():
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_GNNBOOK):
            return "gnnbook"
        if name.startswith(_DGL):
            return "dgl"
        frame = frame.f_back
    return "other"


def _hook(event, args):
    if event != "open" or not isinstance(args[0], (str, os.PathLike)):
        return
    path = os.fspath(args[0])
    if os.path.basename(path) != _NAME or os.path.realpath(path) != _WATCHED:
        return
    role = os.environ.get("DGL_ROLE", "launcher") + "-" + os.environ.get("GNNBOOK_MACHINE_ID", "")
    line = f"{os.getpid()}\\t{role}\\t{_owner()}\\n"
    fd = os.open(os.path.join(_LOG, f"{os.getpid()}.tsv"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


sys.addaudithook(_hook)
'''


@pytest.fixture(scope="module")
def cora2(tmp_path_factory) -> Path:
    return partition_dataset("cora", 2, "random", tmp_path_factory.mktemp("reads") / "cora2")


def test_each_process_of_a_dist_train_reads_the_partition_config_at_most_once(cora2, tmp_path):
    import dgl

    site, logs = tmp_path / "site", tmp_path / "logs"
    site.mkdir()
    logs.mkdir()
    (site / "sitecustomize.py").write_text(COUNTER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
               READS_WATCHED=str(cora2), READS_LOG_DIR=str(logs),
               READS_GNNBOOK_DIR=str(Path(gnnbook.__file__).parent), READS_DGL_DIR=str(Path(dgl.__file__).parent))
    done = subprocess.run([sys.executable, "-m", "gnnbook", "dist-train", "--part-config", str(cora2), "--epochs", "1",
                           "--json", "--workdir", str(tmp_path / "w")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(json.loads(done.stdout)["single_process"]["test_acc_per_seed"]) == 5
    reads = Counter(tuple(line.split("\t")) for log in logs.iterdir() for line in log.read_text().splitlines())
    roles = {(pid, role) for pid, role, *_ in reads}
    # The launching process, a server and a trainer per machine: each was watched.
    assert sorted(role for _, role in roles) == ["client-0", "client-1", "launcher-", "server-0", "server-1"], reads
    summary = "\n".join(f"{role} by {owner}: {n}" for (_, role, owner), n in sorted(reads.items()))
    print(summary)
    for pid, role in roles:
        by_gnnbook = reads[pid, role, "gnnbook"]
        assert by_gnnbook <= 1, f"{role} (pid {pid}) read the partition config {by_gnnbook} times:\n{summary}"
    launcher = next(pid for pid, role in roles if role == "launcher-")
    # In the launching process DGL does not read it either: the baseline reads the parts' files directly.
    assert sum(n for (pid, *_), n in reads.items() if pid == launcher) == 1, summary


def test_the_baseline_builds_the_whole_graph_once_for_all_its_seeds(cora2, monkeypatch):
    builds = []
    monkeypatch.setattr(baseline, "whole_graph", lambda part: builds.append(part) or whole_graph(part))
    config = TrainConfig(epochs=2, seed=3)
    runs = baseline.train_single_process_seeds(open_partition(cora2), config, 3, num_trainers=2)
    assert len(runs) == 3 and len(builds) == 1
    # Sharing the graph changes nothing: the third seed's run is the run on a graph of its own.
    alone = train_single_process(cora2, TrainConfig(epochs=2, seed=5), num_trainers=2)
    assert [h["test_acc"] for h in runs[2]["history"]] == [h["test_acc"] for h in alone["history"]]
    assert len(builds) == 2  # the run alone built its own
