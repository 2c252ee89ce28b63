"""What the distributed runtime must refuse or accept before and while a job
starts: an inactive emulation adaptation, checkpoints of other runs, DGL's own
partitions and scripts, damaged partition files, concurrent cache builds,
stale results, the command line's '--'.

Most tests start no job; the ones that run real DistDGL jobs keep them short.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from gnnbook.distributed import emulation
from gnnbook.distributed.baseline import train_single_process
from gnnbook.distributed.checkpoint import CheckpointError, identity, resume_state, save_checkpoint
from gnnbook.distributed.cluster import LocalCluster
from gnnbook.distributed.config import TrainConfig
from gnnbook.distributed.launcher import LaunchError
from gnnbook.distributed.partition_files import PartitionError, PartitionWarning, read_config
from gnnbook.distributed.partition_cache import cache_folder, cached_partition, partition_dataset

REPO = Path(__file__).resolve().parents[1]


def gnnbook_cli(*argv: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnbook", *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})


@pytest.fixture(scope="module")
def cora2(tmp_path_factory) -> Path:
    return partition_dataset("cora", 2, "random", tmp_path_factory.mktemp("inputs") / "cora2")


@pytest.fixture(scope="module")
def dgl_parts(tmp_path_factory) -> Path:
    """Cora partitioned by DGL's own partition_graph, node data named as DGL's examples name them."""
    import contextlib
    import io

    import dgl

    from gnnbook.data import load_dataset

    graph = load_dataset("cora")
    g = dgl.graph(graph.edges(), num_nodes=graph.num_nodes())
    g.ndata["features"], g.ndata["labels"] = graph.ndata["feat"], graph.ndata["label"]
    for split in ("train", "val", "test"):
        g.ndata[f"{split}_mask"] = graph.ndata[f"{split}_mask"]
    out = tmp_path_factory.mktemp("dglparts")
    with contextlib.redirect_stdout(io.StringIO()):
        dgl.distributed.partition_graph(g, "cora", 2, str(out), part_method="metis", balance_edges=True)
    return out / "cora.json"


# --- item 1: the emulation adaptation must be active in every process, or the process stops

def job_env(machine: int = 1, pythonpath: str | None = None) -> dict[str, str]:
    env = {**os.environ, **emulation.emulation_env("gnnbook1x0abcde", machine)}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return env


def check_in_process(flags: list[str], env: dict[str, str],
                     partition: int | None = None) -> subprocess.CompletedProcess:
    """What the gnnbook trainer does first in every server and trainer, in a real process."""
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from gnnbook.distributed.emulation import verify; "
            f"verify({partition!r}); print('adapted')")
    return subprocess.run([sys.executable, *flags, "-c", code], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("flag, cause", [("-E", "-E, which ignores PYTHONPATH"), ("-I", "isolated (-I)")])
def test_python_flags_that_skip_the_adaptation_stop_the_process(flag, cause):
    done = check_in_process([flag], job_env())
    assert done.returncode != 0 and cause in done.stderr and "machine 0" in done.stderr, done.stderr[-1500:]
    with pytest.raises(emulation.EmulationError, match=cause.replace("(", r"\(").replace(")", r"\)")):
        emulation.preflight([sys.executable, flag, "train.py"], emulation.emulation_env("gnnbook1x0abcde", 0))


def test_dropped_pythonpath_stops_the_process():
    done = check_in_process([], job_env(pythonpath=str(REPO)))  # gnnbook importable, our site folder gone
    assert done.returncode != 0 and "is not on sys.path" in done.stderr and "PYTHONPATH" in done.stderr


def test_a_sitecustomize_first_on_the_path_is_named(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("")
    path = os.pathsep.join([str(tmp_path), str(emulation.SITE_DIR), str(REPO)])
    done = check_in_process([], job_env(pythonpath=path))
    assert done.returncode != 0 and f"another sitecustomize ({tmp_path / 'sitecustomize.py'})" in done.stderr
    with pytest.raises(emulation.EmulationError, match="another sitecustomize"):
        emulation.preflight([sys.executable, "train.py"], {**emulation.emulation_env("gnnbook1x0abcde", 0),
                                                            "PYTHONPATH": path})


def test_an_interpreter_without_gnnbook_exits_with_a_message(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    bare = tmp_path / "bare" / "bin" / "python"
    env = {**emulation.emulation_env("gnnbook1x0abcde", 0), "PYTHONPATH": str(emulation.SITE_DIR)}
    done = subprocess.run([str(bare), "-c", "print('ran unadapted')"], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "ran unadapted" not in done.stdout
    assert "cannot import gnnbook" in done.stderr and str(bare) in done.stderr
    with pytest.raises(emulation.EmulationError, match="cannot import gnnbook"):
        emulation.preflight([str(bare), "train.py"], env)


def test_machine_id_and_partition_must_agree():
    assert check_in_process([], job_env(machine=1), partition=1).stdout.strip() == "adapted"
    done = check_in_process([], job_env(machine=1), partition=0)
    assert done.returncode != 0 and "emulated machine 1 but holds partition 0" in done.stderr


def test_the_sitecustomize_ours_shadows_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins; builtins.shadowed_site_ran = True\n")
    path = os.pathsep.join([str(emulation.SITE_DIR), str(tmp_path), str(REPO)])
    code = ("import builtins, sys; from gnnbook.distributed import emulation; "
            "print(getattr(builtins, 'shadowed_site_ran', False), emulation.missing_cause())")
    done = subprocess.run([sys.executable, "-c", code], env=job_env(pythonpath=path), capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["True", "None"], done.stderr[-1500:]


def test_launch_refuses_an_unadapted_interpreter_before_starting(cora2, tmp_path):
    done = gnnbook_cli("launch", "--part-config", str(cora2), "--workdir", str(tmp_path / "w"), "--",
                       sys.executable, "-E", "-c", "print('started')", timeout=60)
    assert done.returncode == 2 and "-E, which ignores PYTHONPATH" in done.stderr and "Traceback" not in done.stderr
    assert not list(tmp_path.rglob("logs"))  # nothing started


# --- item 6: resume only from a checkpoint of the same run

def test_resume_refuses_a_missing_checkpoint_or_another_run(tmp_path, cora2, dgl_parts):
    config = TrainConfig(epochs=4, checkpoint_dir=str(tmp_path / "ckpt"), resume=True)
    with pytest.raises(CheckpointError, match="no checkpoint in .*--resume-if-present"):
        resume_state(config, 4, cora2)
    assert resume_state(TrainConfig(**{**config.to_dict(), "resume": False, "resume_if_present": True}),
                        4, cora2) is None
    model = torch.nn.Linear(3, 2)
    save_checkpoint(config.checkpoint_dir, dict(epoch=1, model=model.state_dict(), history=[{"epoch": 0}],
                                                identity=identity(config, 4, cora2)))
    assert resume_state(TrainConfig(**{**config.to_dict(), "epochs": 8}), 4, cora2)["epoch"] == 1  # more epochs: fine
    for other, world, part, what in [(dict(lr=0.01), 4, cora2, "lr: checkpoint 0.003, now 0.01"),
                                     (dict(model="gat"), 4, cora2, "model"),
                                     ({}, 2, cora2, "world_size: checkpoint 4, now 2"),
                                     ({}, 4, dgl_parts, "a different partition config")]:
        with pytest.raises(CheckpointError, match=f"different run .*{what}"):
            resume_state(TrainConfig(**{**config.to_dict(), **other}), world, part)


def test_dist_train_refuses_a_missing_checkpoint_before_starting(cora2, tmp_path):
    done = gnnbook_cli("dist-train", "--part-config", str(cora2), "--resume", "--checkpoint-dir",
                       str(tmp_path / "none"), "--workdir", str(tmp_path / "w"), timeout=60)
    assert done.returncode == 2 and "no checkpoint in" in done.stderr and "Traceback" not in done.stderr
    assert not list(tmp_path.rglob("logs"))


# --- item 8: DGL's own partitions (features / labels) and unmodified DistDGL scripts

def test_node_data_names_are_detected_or_listed(dgl_parts, tmp_path):
    done = gnnbook_cli("dist-train", "--part-config", str(dgl_parts), "--feat-name", "feat", "--epochs", "1",
                       "--workdir", str(tmp_path / "w"), timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "no node data 'feat'" in done.stderr and "features, labels" in done.stderr and "--feat-name" in done.stderr
    single = train_single_process(dgl_parts, TrainConfig(epochs=2), num_trainers=2)  # features/labels found
    assert 0.3 < single["test_acc"] <= 1.0


def test_dist_train_on_dgl_made_partitions(dgl_parts, tmp_path):
    done = gnnbook_cli("dist-train", "--part-config", str(dgl_parts), "--epochs", "2", "--batch-size", "16",
                       "--no-baseline", "--json", "--deadline", "240", "--workdir", str(tmp_path / "w"))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["world_size"] == 2 and result["epochs_run"] == 2 and result["test_acc"] > 0.3
    assert "no SHA-256 digests" in done.stderr  # a partition gnnbook did not write is checked only partly


DGL_STYLE_SCRIPT = textwrap.dedent("""
    # Written the way DGL's examples/distributed/graphsage script is: its own arguments, DGL's node-data names.
    import argparse, json, os
    import dgl, torch
    import torch.nn.functional as F
    from dgl.nn import SAGEConv

    parser = argparse.ArgumentParser()
    parser.add_argument("--graph_name"); parser.add_argument("--ip_config"); parser.add_argument("--part_config")
    parser.add_argument("--num_epochs", type=int); parser.add_argument("--batch_size", type=int)
    parser.add_argument("--out")
    args = parser.parse_args()
    dgl.distributed.initialize(args.ip_config)
    torch.distributed.init_process_group("gloo")
    g = dgl.distributed.DistGraph(args.graph_name, part_config=args.part_config)
    book = g.get_partition_book()
    train_nids = dgl.distributed.node_split(g.ndata["train_mask"], book, force_even=True)
    classes = int(g.ndata["labels"][0:g.num_nodes()].max()) + 1

    class Sage(torch.nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.layers = torch.nn.ModuleList([SAGEConv(n_in, 16, "mean"), SAGEConv(16, n_out, "mean")])
        def forward(self, blocks, x):
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                x = layer(block, x)
                x = F.relu(x) if i == 0 else x
            return x

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Sage(g.ndata["features"].shape[1], classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = dgl.dataloading.DistNodeDataLoader(g, train_nids, dgl.dataloading.NeighborSampler([5, 5]),
                                                batch_size=args.batch_size, shuffle=True)
    losses = []
    for epoch in range(args.num_epochs):
        for input_nodes, seeds, blocks in loader:
            loss = F.cross_entropy(model(blocks, g.ndata["features"][input_nodes]), g.ndata["labels"][seeds].long())
            optimizer.zero_grad(); loss.backward(); optimizer.step()
            losses.append(float(loss))
    with open(os.path.join(args.out, f"rank{g.rank()}.json"), "w") as f:
        json.dump(dict(partid=int(book.partid), train=len(train_nids), steps=len(losses), losses=losses), f)
""")


def readme_graphsage_command() -> list[str]:
    """The README's command for DGL's own GraphSAGE example, as words."""
    text = (REPO / "README.md").read_text()
    block = text[text.index("DGL's own GraphSAGE example"):].split("```bash\n", 1)[1].split("```", 1)[0]
    return shlex.split(block.replace("\\\n", " "))


def test_unmodified_dgl_style_script_through_launch(dgl_parts, tmp_path):
    """The README's command for DGL's own GraphSAGE example, run with an
    equivalent script on DGL-made partitions of Cora instead of ogbn-products."""
    script = tmp_path / "node_classification.py"
    script.write_text(DGL_STYLE_SCRIPT)
    words = readme_graphsage_command()
    assert words[:3] == ["python", "-m", "gnnbook"] and "{ip_config}" in words and "{part_config}" in words
    options, command = words[3:words.index("--")], words[words.index("--") + 1:]
    options[options.index("--part-config") + 1] = str(dgl_parts)
    swap = {"python3": sys.executable, "node_classification.py": str(script), "ogbn-products": "cora"}
    command = [swap.get(w, w) for w in command]
    command[command.index("--batch_size") + 1] = "16"  # Cora has 140 training nodes
    # gnnbook's options exactly as README gives them (no --deadline, no --workdir): only the paths differ.
    done = gnnbook_cli(*options, "--", *command, "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert sorted(r["partid"] for r in ranks) == [0, 0, 1, 1]  # 2 trainers on each emulated machine
    assert sum(r["train"] for r in ranks) == 140 and len({r["steps"] for r in ranks}) == 1 and ranks[0]["steps"] > 0
    for r in ranks:  # it trained: the loss of the last steps is below the first
        assert sum(r["losses"][-3:]) < sum(r["losses"][:3]), r["losses"]


def test_placeholders_and_the_users_own_separator(cora2, tmp_path):
    done = gnnbook_cli("launch", "--part-config", str(cora2), "--num-trainers", "2", "--dry-run", "--workdir",
                       str(tmp_path / "w"), "--", "python3", "s.py", "--ip_config", "{ip_config}",
                       "--n", "{num_trainers}", "--", "--raw", "{x}", timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    ip_config = re.search(r"ip_config (\S+):", done.stdout).group(1)
    assert ip_config.startswith(str(tmp_path / "w"))
    assert done.stdout.count(f"python3 s.py --ip_config {ip_config} --n 2 -- --raw '{{x}}'") == 6


# --- not tested before: damaged partition files are refused before any server starts

def test_corrupt_partition_file_is_refused_before_start(cora2, tmp_path):
    for damage in ("truncate", "flip"):
        copy = tmp_path / damage
        shutil.copytree(cora2.parent, copy)
        feats = copy / "part1" / "node_feat.dgl"
        data = bytearray(feats.read_bytes())
        feats.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:-1] + bytes([data[-1] ^ 1]))
        with pytest.raises(PartitionError, match="node_feat.dgl is damaged .*SHA-256"):
            LocalCluster(copy / cora2.name)
    done = gnnbook_cli("dist-train", "--part-config", str(copy / cora2.name), "--epochs", "1",
                       "--workdir", str(tmp_path / "w"), timeout=120)
    assert done.returncode == 2 and "is damaged" in done.stderr and not list(tmp_path.rglob("logs"))


def test_dgl_made_partition_gets_header_checks(dgl_parts, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(dgl_parts.parent, copy)
    with pytest.warns(PartitionWarning, match="no SHA-256 digests"):
        read_config(copy / "cora.json")
    (copy / "part0" / "graph.dgl").write_bytes(b"\0" * 64)
    with pytest.raises(PartitionError, match="graph.dgl is damaged or not a DGL file"):
        read_config(copy / "cora.json")


# --- item 9: the partition cache, stale results

BUILD = ("import json, sys; import gnnbook.distributed.partition_cache as p; calls = []; build = p._build; "
         "p._build = lambda *a, **k: calls.append(1) or build(*a, **k); "
         "path = p.cached_partition('powerlaw', 2, 'random', num_nodes=3000); "
         "print(json.dumps([str(path), len(calls)]))")


def test_concurrent_cache_builds_make_one_partition(tmp_path):
    env = {**os.environ, "GNNBOOK_DATA_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", BUILD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    results = [json.loads(p.communicate(timeout=180)[0].strip().splitlines()[-1]) for p in procs]
    assert len({path for path, _ in results}) == 1 and sum(calls for _, calls in results) == 1, results
    read_config(results[0][0])
    assert [p.name for p in (tmp_path / "partitions").iterdir()] == [Path(results[0][0]).parent.name]


def test_cache_key_includes_the_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    assert cache_folder("cora", 2, "random") != cache_folder("cora", 2, "random", seed=1)
    seeded = cached_partition("powerlaw", 2, "random", seed=1, num_nodes=500)
    plain = cached_partition("powerlaw", 2, "random", num_nodes=500)
    assert seeded != plain and json.loads(seeded.read_text())["gnnbook"]["seed"] == 1
    digests = [json.loads(c.read_text())["gnnbook"]["sha256"]["part0/graph.dgl"] for c in (seeded, plain)]
    assert digests[0] != digests[1]  # random partitioning with another seed: another partition


def test_a_stale_result_in_a_reused_workdir_is_not_trusted(cora2, tmp_path, monkeypatch):
    reused = tmp_path / "job1-reused"
    reused.mkdir()
    (reused / "result.json").write_text(json.dumps({"test_acc": 0.99, "stale": True}))
    with LocalCluster(cora2, workdir=tmp_path, deadline_s=60) as cluster:
        # A real job, in a folder that already holds the file train() reads, whose processes all
        # succeed without writing a result.
        monkeypatch.setattr(cluster, "new_job_dir", lambda: reused)
        monkeypatch.setattr(cluster, "trainer_command", lambda config: [sys.executable, "-c", "pass"])
        with pytest.raises(LaunchError, match="wrote no result"):
            cluster.train(TrainConfig(epochs=1))  # the stale result.json is never read
