"""Write a DGL partition of a graph, and read and check one back.

Book: 8.3.1 dataset preprocessing (partitioning for DistDGL).

Used in: chapters/08_dgl_practice.ipynb, labs/lab08_distributed_dgl.ipynb.

:func:`partition_graph` runs DGL's ``partition_graph`` (METIS with the
training nodes and the edges balanced across partitions, or random) on a
graph in this process, writing into a temporary folder that is renamed into
place only when complete, so a crash never leaves a half-written partition.
Notebooks and commands partition by dataset name instead, in a supervised child
process with a deadline, into the cache (:mod:`~gnnbook.distributed.partition_cache`):
METIS is native code that must not run inside a notebook's kernel.

:func:`open_partition` reads a partition config once and checks it (see below),
returning an immutable :class:`OpenedPartition` that the cluster, the launcher,
the deadline estimate, the checkpoint identity and the trainer take instead of
reading the config again.

:func:`load_partition` reads a partition config back and measures what the
partitioning did: the fraction of edges cut, the replication factor (inner +
halo nodes over all nodes) and the balance of nodes, edges and training nodes.

The partitioned graph is the dataset with exactly one self-loop per node
(``gnnbook.training.train.prepare_graph``), the graph the models train on; self-loops
are never cut and are left out of the edge-cut fraction.

METIS as DGL 2.1.0 calls it is not seeded: two partitionings of the same
graph differ slightly (cora, K=2: edge cut 0.054-0.067 measured).  The cache
keeps one partition per (dataset, method, K, seed), so repeated runs use the
same one.

Every file gnnbook writes is listed with its SHA-256 in the config
(``gnnbook.sha256``), and the config itself is covered by the SHA-256 of its
canonical JSON (``gnnbook.config_sha256``, :func:`config_digest`);
:func:`open_partition` checks them, so a truncated or modified partition, or a
config edited after partitioning (a graph name, a file name, a digest), is
refused before any server starts.  A partition made by
DGL's own tools has no digests: then only the files' presence and headers are
checked, and a warning says so.

Example:
    >>> config = partition_graph(load_dataset("cora"), "cora", 2, "metis", "/tmp/cora-2")  # doctest: +SKIP
    >>> report = load_partition(config)                                                   # doctest: +SKIP
    >>> report.num_parts, round(report.edge_cut_fraction, 2)                              # doctest: +SKIP
    (2, 0.04)
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import struct
import tempfile
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

import torch
from tqdm.auto import tqdm

from ..data.files import sha256_of

METHODS = ("metis", "random")


class PartitionError(ValueError):
    """A partition cannot be made or read; the message says why and what to do."""


@dataclass
class PartStats:
    part_id: int
    inner_nodes: int
    halo_nodes: int
    inner_edges: int
    cut_edges: int  # inner edges whose source is a halo node (self-loops excluded)
    train_nodes: int


@dataclass
class PartitionReport:
    """What :func:`load_partition` measured."""

    part_config: str
    graph_name: str
    method: str
    num_parts: int
    num_nodes: int
    num_edges: int  # without self-loops
    edge_cut_fraction: float
    replication_factor: float  # (inner + halo nodes) / nodes
    node_balance: float  # max / mean inner nodes
    edge_balance: float
    train_balance: float
    parts: list[PartStats] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """The per-partition numbers and the summary as plain text."""
        head = f"{'part':>4} {'inner nodes':>11} {'halo nodes':>10} {'inner edges':>11} {'cut edges':>9} {'train':>6}"
        rows = [f"{p.part_id:>4} {p.inner_nodes:>11} {p.halo_nodes:>10} {p.inner_edges:>11} {p.cut_edges:>9} "
                f"{p.train_nodes:>6}"
                for p in self.parts]
        summary = (f"{self.graph_name}: {self.num_parts} parts ({self.method}), edge cut {self.edge_cut_fraction:.3f}, "
                   f"replication {self.replication_factor:.3f}, balance nodes {self.node_balance:.3f} "
                   f"edges {self.edge_balance:.3f} train {self.train_balance:.3f}")
        return "\n".join([head, *rows, summary])


LARGE_GRAPH_NODES = 100_000  # partitioning shows its stages from this size on
STAGES = ("self-loops and edge order", "DGL {method} into {num_parts} parts", "SHA-256 of the files")


def graph_name_for(dataset: str) -> str:
    """DGL uses the graph name in shared-memory names: keep it to safe characters."""
    return "".join(c if c.isalnum() else "_" for c in dataset.lower())


def _quietly(fn, *args, **kwargs):
    """DGL prints a line per step of partitioning; keep stdout clean for --json."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def _canonical(graph):
    """The same graph with edges sorted by (source, destination): METIS's result
    depends on the order edges are stored in, which differs between loaders."""
    import dgl

    src, dst = graph.edges()
    order = torch.argsort(src * graph.num_nodes() + dst)
    out = dgl.graph((src[order], dst[order]), num_nodes=graph.num_nodes())
    out.ndata.update(graph.ndata)
    return out


def partition_graph(graph, graph_name: str, num_parts: int, method: str, out_dir: str | Path,
                    seed: int = 0, feat_name: str = "feat", label_name: str = "label",
                    on_stage: Callable[[str], None] | None = None) -> Path:
    """Partition a DGLGraph (ndata feat/label/masks) into ``out_dir``, in this process; return
    the partition config path.  ``out_dir`` must not exist yet.  The partition stores the
    features and labels under ``feat_name`` and ``label_name`` ("features" and "labels" for
    DGL's distributed examples, which read those names).  ``on_stage`` is called with each
    stage's name as it starts (the supervised build forwards them to its caller).

    More than 8 parameters: ``feat_name`` and ``label_name`` are the trainer's own names for the node data
    (:class:`~gnnbook.distributed.config.TrainConfig`), kept apart as there, and ``on_stage`` is the hook of
    the supervised build (:mod:`~gnnbook.distributed.partition_cache`)."""
    import dgl

    from ..training.train import prepare_graph

    if method not in METHODS:
        raise PartitionError(f"unknown partition method '{method}'; use one of {', '.join(METHODS)}")
    if not isinstance(num_parts, int) or num_parts < 1:
        raise PartitionError(f"the number of partitions must be a positive integer, got {num_parts!r}")
    if num_parts > graph.num_nodes():
        raise PartitionError(f"cannot make {num_parts} partitions of a graph with {graph.num_nodes()} nodes; "
                             "use at most as many partitions as nodes")
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise PartitionError(f"{out_dir} already exists; remove it or choose another --out folder")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # A large graph takes minutes: a bar names the stage it is in (DGL's own step log stays hidden).
    stages = tqdm(total=3, desc=f"partition {graph_name}: {STAGES[0]}", leave=False,
                  disable=graph.num_nodes() < LARGE_GRAPH_NODES, bar_format="{desc} [{n}/{total}, {elapsed}]")

    def stage(i: int) -> None:
        stages.update(i - stages.n)
        text = STAGES[i].format(method=method, num_parts=num_parts)
        stages.set_description(f"partition {graph_name}: {text}")
        if on_stage is not None:
            on_stage(text)

    stage(0)
    g = _canonical(prepare_graph(graph))
    dgl.seed(seed)
    torch.manual_seed(seed)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        stage(1)
        num_classes, num_features = int(g.ndata["label"].max()) + 1, int(g.ndata["feat"].shape[1])
        g.ndata[feat_name], g.ndata[label_name] = g.ndata.pop("feat"), g.ndata.pop("label")
        _quietly(dgl.distributed.partition_graph, g, graph_name, num_parts, str(tmp), num_hops=1,
                 part_method=method, balance_ntypes=g.ndata["train_mask"].int() if method == "metis" else None,
                 balance_edges=method == "metis")
        stage(2)
        # What the trainer needs and DGL does not store; DGL ignores extra keys.
        config_path = tmp / f"{graph_name}.json"
        config = json.loads(config_path.read_text())
        config["gnnbook"] = dict(num_classes=num_classes, num_features=num_features,
                                 method=method, seed=seed, sha256=_digests(tmp, skip=config_path))
        config["gnnbook"]["config_sha256"] = config_digest(config)
        config_path.write_text(json.dumps(config, indent=1))
        # DGL writes paths relative to the config: renaming the folder keeps them valid.
        os.replace(tmp, out_dir)
        stages.update(1)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        stages.close()
    return out_dir / f"{graph_name}.json"


GRAPH_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class OpenedPartition:
    """A partition config read and checked once by :func:`open_partition`: what the
    launcher, the cluster, the deadline estimate, the checkpoint identity and the
    command placeholders need, so that none of them reads the config again.

    ``config`` is the parsed JSON (read-only view); ``config_digest`` the SHA-256 of
    its bytes (the checkpoint identity).  ``node_data_names`` (part 0's, without
    the node-type prefix) and ``train_nodes`` (over all parts) are read from the
    node-data files when opened with ``node_data=True``, else ``None``; ``verified``
    says whether the files were checked (``verify=True``).

    Example:
        >>> opened = open_partition("cora-2/cora.json")          # doctest: +SKIP
        >>> opened.graph_name, opened.num_parts, opened.train_nodes  # doctest: +SKIP
        ('cora', 2, 140)
    """

    config_path: Path
    graph_name: str
    num_parts: int
    config_digest: str
    config: Mapping[str, Any] = field(repr=False, compare=False)
    verified: bool = False
    node_data_names: tuple[str, ...] | None = None
    train_nodes: int | None = None

    def part_file(self, part_id: int, key: str) -> Path:
        """The path of file ``key`` (``part_graph``, ``node_feats``...) of part ``part_id``."""
        return self.config_path.parent / self.config[f"part-{part_id}"][key]


def open_partition(part_config: str | Path | OpenedPartition, verify: bool = True,
                   node_data: bool = True) -> OpenedPartition:
    """Read the partition config once and check it: the fields DistDGL needs and
    (``verify``) its files (SHA-256 for a partition gnnbook wrote, presence and
    headers for others, see the module docstring); with ``node_data`` also read
    every part's node-data file once (names and training nodes).  Every check of a
    partition happens here; an :class:`OpenedPartition` passed in is returned as it
    is (unless it lacks the checks or the node data asked for).

    Example:
        >>> open_partition("cora-2/cora.json").num_parts  # doctest: +SKIP
        2
    """
    if isinstance(part_config, OpenedPartition):
        if (part_config.verified or not verify) and (part_config.node_data_names is not None or not node_data):
            return part_config
        part_config = part_config.config_path
    path = Path(part_config)
    if not path.is_file():
        raise PartitionError(f"partition config {path} does not exist; make one with "
                             "`python -m gnnbook partition --dataset NAME --num-parts K --out DIR`")
    raw = path.read_bytes()  # the one read of the config (its digest and its JSON from the same bytes)
    try:
        config = json.loads(raw.decode())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PartitionError(f"partition config {path} is not valid JSON ({err}); partition the dataset again") from err
    missing = [k for k in ("graph_name", "num_parts", "node_map", "edge_map")
               if not isinstance(config, dict) or k not in config]
    if missing:
        raise PartitionError(f"partition config {path} lacks {', '.join(missing)}; it is not a DGL partition "
                             "config or it is damaged: partition the dataset again")
    name = config["graph_name"]
    if not isinstance(name, str) or not GRAPH_NAME.fullmatch(name):
        # The name reaches file names, shared-memory names and (cluster mode) a remote shell.
        raise PartitionError(f"partition config {path}: graph_name {name!r} is not a plain name (letters, digits, "
                             "'_', '-', '.', at most 64, not starting with '.' or '-'); "
                             "partition again with such a name")
    if not isinstance(config["num_parts"], int) or config["num_parts"] < 1:
        raise PartitionError(f"partition config {path}: num_parts {config['num_parts']!r} is not a positive integer")
    for i in range(int(config["num_parts"])):
        entry = config.get(f"part-{i}")
        if not isinstance(entry, dict):
            raise PartitionError(f"partition config {path} has no entry for part-{i}; partition again")
        for key in ("node_feats", "part_graph"):
            file = path.parent / entry.get(key, "")
            if not file.is_file():
                raise PartitionError(f"partition config {path}: file {file} of part {i} is missing; partition again")
    if verify:
        _verify_files(path, config)
    opened = OpenedPartition(path, name, int(config["num_parts"]), hashlib.sha256(raw).hexdigest(),
                             MappingProxyType(config), verified=verify)
    return _with_node_data(opened) if node_data else opened


def _with_node_data(opened: OpenedPartition) -> OpenedPartition:
    from dgl.data.utils import load_tensors

    names, train = (), 0
    for i in range(opened.num_parts):
        feats = opened.part_file(i, "node_feats")
        try:
            tensors = load_tensors(str(feats))
        except Exception as err:  # DGL raises assorted errors on damaged files
            raise PartitionError(f"cannot read the node data of part {i} ({feats}): {err}; partition again") from err
        if i == 0:
            names = tuple(sorted({k.split("/")[-1] for k in tensors}))
        train += sum(int(v.sum()) for k, v in tensors.items() if k.endswith("train_mask"))
    return replace(opened, node_data_names=names, train_nodes=train)


def read_config(part_config: str | Path | OpenedPartition, verify: bool = True) -> dict[str, Any]:
    """The partition config as a (new) dict, read and checked by :func:`open_partition`
    (without the node data)."""
    return dict(open_partition(part_config, verify=verify, node_data=False).config)


def config_digest(config: Mapping[str, Any]) -> str:
    """The SHA-256 of the config's canonical JSON (sorted keys, no spaces), without the
    ``gnnbook.config_sha256`` field that records it: re-indenting the file keeps it,
    changing any value (a graph name, a file name, a digest) does not.

    Example:
        >>> config_digest({"graph_name": "cora", "gnnbook": {"config_sha256": "x"}}) == config_digest(
        ...     {"gnnbook": {}, "graph_name": "cora"})
        True
    """
    body = dict(config)
    if isinstance(body.get("gnnbook"), Mapping):
        body["gnnbook"] = {k: v for k, v in body["gnnbook"].items() if k != "config_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _check_config_digest(path: Path, config: Mapping[str, Any]) -> None:
    """A config gnnbook wrote (one that lists its files' digests) must be the config it wrote."""
    recorded = config["gnnbook"].get("config_sha256")
    if not isinstance(recorded, str):
        raise PartitionError(f"partition config {path} lists its files' SHA-256 but records no digest of the config "
                             "itself (gnnbook.config_sha256: written by an older gnnbook, or the field was removed), "
                             "so an edit to it cannot be detected; partition the dataset again")
    actual = config_digest(config)
    if actual != recorded:
        raise PartitionError(f"partition config {path} was edited after partitioning: its canonical SHA-256 is "
                             f"{actual[:16]}..., gnnbook.config_sha256 records {recorded[:16]}...; partition the "
                             "dataset again (or restore the config as gnnbook wrote it)")


def _digests(folder: Path, skip: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): sha256_of(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p != skip}


# The first 8 bytes of DGL's files (little-endian magic numbers of DGL 2.1's serializers).
GRAPH_MAGIC = struct.pack("<Q", 0xDD2E4FF046B4A13F)  # dgl.save_graphs: graph.dgl
TENSORS_MAGIC = struct.pack("<Q", 0xDD5A9FBE3FA2443F)  # dgl.data.utils.save_tensors: node_feat.dgl, edge_feat.dgl
_VERIFIED: dict[str, tuple] = {}  # config path -> the files' (name, size, mtime) when last verified


def _verify_files(path: Path, config: dict[str, Any]) -> None:
    files = {(path.parent / config[f"part-{i}"][k]).resolve(): k for i in range(int(config["num_parts"]))
             for k in ("part_graph", "node_feats", "edge_feats") if config[f"part-{i}"].get(k)}
    expected = config.get("gnnbook", {}).get("sha256") if isinstance(config.get("gnnbook"), dict) else None
    if expected:
        _check_config_digest(path, config)
        files.update({(path.parent / name).resolve(): "listed" for name in expected})
    for file in files:
        if not file.is_file():
            raise PartitionError(f"partition config {path}: file {file} is missing; partition again")
    stamp = tuple(sorted((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)) + (path.stat().st_mtime_ns,)
    if _VERIFIED.get(str(path.resolve())) == stamp:
        return
    if expected:
        for name, digest in expected.items():
            actual = sha256_of(path.parent / name)
            if actual != digest:
                raise PartitionError(f"partition file {path.parent / name} is damaged (truncated or modified): its "
                                     f"SHA-256 is {actual[:16]}..., {path.name} records {digest[:16]}...; "
                                     "partition the dataset again")
    else:
        for file, key in files.items():
            magic = GRAPH_MAGIC if key == "part_graph" else TENSORS_MAGIC
            with open(file, "rb") as f:
                header = f.read(16)
            if len(header) < 16 or header[:8] != magic:
                raise PartitionError(f"partition file {file} is damaged or not a DGL file (its header is not DGL's "
                                     f"{'graph' if key == 'part_graph' else 'tensor'} format); partition again")
        warnings.warn(f"{path} records no SHA-256 digests (it was not written by gnnbook): only the presence "
                      "and headers of its files were checked", PartitionWarning, stacklevel=3)
    _VERIFIED[str(path.resolve())] = stamp


class PartitionWarning(UserWarning):
    """A partition could be checked only partly (no digests recorded)."""


def node_data_names(part_config: str | Path | OpenedPartition) -> list[str]:
    """The node-data names of a partition (part 0's, without the node-type prefix)."""
    return list(open_partition(part_config).node_data_names or ())


def load_partition(part_config: str | Path | OpenedPartition) -> PartitionReport:
    """Read every partition of ``part_config`` and measure edge cut, replication
    and balance (see :class:`PartitionReport`)."""
    import dgl

    opened = open_partition(part_config, node_data=False)
    config, part_config = opened.config, opened.config_path
    parts = []
    for i in range(int(config["num_parts"])):
        try:
            g, node_feats, *_ = _quietly(dgl.distributed.load_partition, str(part_config), i)
        except Exception as err:  # DGL raises assorted errors on damaged files
            raise PartitionError(f"cannot read part {i} of {part_config}: {err}; partition again") from err
        inner = g.ndata["inner_node"].bool()
        src, dst = g.edges()
        real = g.edata["inner_edge"].bool() & (src != dst)
        train = next((v for k, v in node_feats.items() if k.endswith("train_mask")), torch.zeros(0))
        parts.append(PartStats(i, int(inner.sum()), int((~inner).sum()), int(real.sum()),
                               int((real & ~inner[src]).sum()), int(train.sum())))

    def balance(values: list[int]) -> float:
        mean = sum(values) / len(values)
        return max(values) / mean if mean else 1.0

    num_nodes = sum(p.inner_nodes for p in parts)
    num_edges = sum(p.inner_edges for p in parts)
    return PartitionReport(
        part_config=str(part_config), graph_name=config["graph_name"], method=config.get("part_method", "?"),
        num_parts=len(parts), num_nodes=num_nodes, num_edges=num_edges,
        edge_cut_fraction=sum(p.cut_edges for p in parts) / max(1, num_edges),
        replication_factor=sum(p.inner_nodes + p.halo_nodes for p in parts) / max(1, num_nodes),
        node_balance=balance([p.inner_nodes for p in parts]), edge_balance=balance([p.inner_edges for p in parts]),
        train_balance=balance([p.train_nodes for p in parts]), parts=parts,
    )
