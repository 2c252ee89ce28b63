"""Partition a dataset by name in a supervised child process, into the partition cache.

Book: 8.3.1 dataset preprocessing (partitioning for DistDGL).

Used in: chapters/05a_minibatch_training_and_sampling.ipynb, chapters/05f_distributed_cache.ipynb,
chapters/08_dgl_practice.ipynb, chapters/08b_beyond_one_machine.ipynb, labs/lab08_distributed_dgl.ipynb.

:func:`partition_dataset` loads (or generates) the dataset and partitions it
(:func:`gnnbook.distributed.partition_files.partition_graph`) in a child process of a
:class:`~gnnbook.base.procs.ProcessGroup`, never in the caller: the child has a
deadline that grows with the graph's size (:func:`partition_deadline_s`), its stages
are shown in the caller as they start, it writes into a temporary folder that the
caller renames into place only when the child succeeded, and a crash, a kill or the
deadline raises :class:`PartitionFailed` naming the stage, the graph and its size,
and keeping the child's log (with its threads' stacks when it hung).  Nothing is
left half-written and the caller (a notebook's kernel) stays usable.

:func:`cached_partition` / :func:`open_cached_partition` keep one copy per
(dataset, options, method, K, seed) under ``cache_dir()/partitions``; processes that
ask for the same one at once wait for a single build (a lock on the cache folder).

Why a child process.  While METIS runs, GKlib (METIS's library, inside DGL's ``libdgl.so``)
replaces the whole process's SIGABRT and SIGTERM handlers with one that ``longjmp``\ s back into
METIS (``gk_sigtrap``; GKlib's SIGMEM is SIGABRT and SIGERR is SIGTERM), which then frees all it
allocated (``gk_malloc_cleanup``).  Measured here: a SIGTERM sent while METIS runs does not stop
the process; METIS returns "Error in Metis partitioning: other errors" instead (3 of 3 runs), and
the same happens when this module's deadline stops a child (its log shows it).  With SIGTERMs at
random moments and another thread allocating, the process was ended by SIGTERM after 6-11
partitions in 3 of 3 loops: the handlers of the process are not what Python installed.  A jump
out of a signal handler taken while a thread is inside glibc's allocator leaves the allocator's
lock held; the next ``free`` in ``gk_malloc_cleanup`` then waits forever, and so does every thread
that allocates.  Those are the stacks of chapter 8b's hang (issue 44: the kernel's main thread in
``gk_malloc_cleanup -> free``, ipykernel's output-capture thread in ``realloc``), so this is the
likely mechanism; the hang itself did not come back here in 55 runs of 8b's scale-up partitioning
inside a Jupyter kernel with a thread writing to the captured output meanwhile (5-8 s each).  A
child process has no capture threads and gets no signal meant for a kernel; if it hangs anyway,
its deadline stops it and only the child is lost.

Example:
    >>> config = cached_partition("cora", 2)              # doctest: +SKIP
    >>> open_cached_partition("cora", 2).num_parts        # doctest: +SKIP
    2
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import json
import os
import shutil
import signal
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..base.launch import start_ranks
from ..base.procs import ProcessFailed, ProcessGroup, describe_exit
from ..data import DATASETS, dataset_key, load_dataset, scale_arrays, synthetic_arrays
from ..data.files import cache_dir
from .partition_files import (GRAPH_NAME, LARGE_GRAPH_NODES, METHODS, OpenedPartition, PartitionError,
                              PartitionWarning, graph_name_for, open_partition, partition_graph)

GENERATOR_VERSIONS = {"scale": "scale-v2"}  # bump when gnnbook.data.scale_arrays draws another graph
# The deadline of one build: start-up and a shipped dataset, plus a time per directed edge of a generated
# graph.  Measured on a quiet 2-core CPU (child start, generation, METIS into 3 parts, digests): 300,000 nodes x
# 20 = 6M edges in 11 s, 1M nodes (20M edges) in ~40 s: about 2 us per edge.  The deadline allows about 6 times
# that, for a busy or slower machine: a hang in chapter 8b (6M edges) is stopped after 3 minutes, not never.
BUILD_BASE_S = 120.0
BUILD_PER_EDGE_S = 12.5e-6
PROGRESS_ENV = "GNNBOOK_PARTITION_PROGRESS"  # the file the child appends its stages to


class PartitionFailed(PartitionError):
    """The child that built a partition failed, was killed or passed its deadline; ``log_dir`` keeps its log."""

    def __init__(self, message: str, stage: str, log_dir: Path, returncode: int | None):
        super().__init__(message)
        self.stage, self.log_dir, self.returncode = stage, log_dir, returncode


def graph_size(dataset: str, options: dict[str, Any]) -> tuple[int, int] | None:
    """(nodes, directed edges) of a generated graph before it is built (from its options and the
    generator's defaults); ``None`` for a shipped dataset (all small).  Unknown names and options are
    refused here, before any process starts.

    Example:
        >>> graph_size("scale", dict(num_nodes=300_000, avg_degree=20))
        (300000, 6000000)
    """
    key = dataset_key(dataset)
    if key in DATASETS:
        if options:
            raise TypeError(f"options {sorted(options)} only apply to synthetic graphs")
        return None
    generator = scale_arrays if key == "scale" else synthetic_arrays
    try:
        bound = inspect.signature(generator).bind_partial(**options)
    except TypeError as err:
        raise TypeError(f"{dataset}: {err}; its options are those of gnnbook.data.{generator.__name__}") from None
    bound.apply_defaults()
    nodes, degree = bound.arguments["num_nodes"], bound.arguments["avg_degree"]
    return int(nodes), int(nodes * degree)


def partition_deadline_s(dataset: str, options: dict[str, Any], builds: int = 1) -> float:
    """The deadline of a child that makes ``builds`` partitions of one graph: :data:`BUILD_BASE_S` (its start)
    plus :data:`BUILD_PER_EDGE_S` per edge and build.

    Example:
        >>> partition_deadline_s("scale", dict(num_nodes=300_000, avg_degree=20))
        195.0
    """
    size = graph_size(dataset, options)
    return BUILD_BASE_S + (BUILD_PER_EDGE_S * size[1] * builds if size else 0.0)


def build(dataset: str, seed: int, options: dict[str, Any], jobs: list[list[Any]]) -> list[str]:
    """The child's side (``python -m gnnbook.base.worker``): load the dataset once, partition it for each
    ``[num_parts, method, out_dir]`` of ``jobs``, report each stage to the file named by :data:`PROGRESS_ENV`;
    return the config paths."""
    progress = os.environ.get(PROGRESS_ENV)

    def reporter(prefix: str):
        def on_stage(text: str) -> None:
            if progress:
                with open(progress, "a") as f:
                    f.write(prefix + text + "\n")
        return on_stage

    reporter("")(f"load {dataset}" if dataset_key(dataset) in DATASETS else f"generate the {dataset} graph")
    graph = load_dataset(dataset, **options)
    return [str(partition_graph(graph, graph_name_for(dataset), num_parts, method, out_dir, seed=seed,
                                on_stage=reporter(f"K={num_parts} {method}: " if len(jobs) > 1 else "")))
            for num_parts, method, out_dir in jobs]


def partition_dataset(dataset: str, num_parts: int, method: str = "metis", out_dir: str | Path | None = None,
                      seed: int = 0, deadline_s: float | None = None, **dataset_options: Any) -> Path:
    """Load ``dataset`` (any name :func:`gnnbook.data.load_dataset` accepts, with its synthetic
    options) and partition it into ``out_dir`` in a supervised child process (see the module
    docstring); return the partition config path.  Without ``out_dir`` the partition goes to the
    cache (:func:`cached_partition`).  ``deadline_s`` defaults to :func:`partition_deadline_s`.

    Example:
        >>> partition_dataset("cora", 2, "metis", "/tmp/cora-2")  # doctest: +SKIP
        PosixPath('/tmp/cora-2/cora.json')
    """
    if out_dir is None:
        return cached_partition(dataset, num_parts, method, seed=seed, **dataset_options)
    _build(dataset, [(num_parts, method, Path(out_dir))], seed, deadline_s, dataset_options)
    return Path(out_dir) / f"{graph_name_for(dataset)}.json"


def _build(dataset: str, jobs: list[tuple[int, str, Path]], seed: int, deadline_s: float | None,
           options: dict[str, Any]) -> None:
    """Partition ``dataset`` for every ``(num_parts, method, out_dir)`` of ``jobs`` (the out_dirs in one
    folder) in one supervised child, which generates or loads the graph once; each result is renamed into
    its ``out_dir`` when the child succeeded, and nothing is left when it did not."""
    for _, method, _ in jobs:
        if method not in METHODS:
            raise PartitionError(f"unknown partition method '{method}'; use one of {', '.join(METHODS)}")
    size = graph_size(dataset, options)  # refuses an unknown name or option at once
    parent = jobs[0][2].parent
    for _, _, out_dir in jobs:
        if out_dir.exists():
            raise PartitionError(f"{out_dir} already exists; remove it or choose another --out folder")
        if out_dir.parent != parent:
            raise PartitionError(f"the partitions of one build go into one folder, not {out_dir.parent} and {parent}")
    parent.mkdir(parents=True, exist_ok=True)
    deadline = deadline_s if deadline_s is not None else partition_deadline_s(dataset, options, len(jobs))
    name = graph_name_for(dataset)
    what = (f"{dataset} ({f'{size[0]:,} nodes, {size[1]:,} edges' if size else 'shipped'}) into "
            + ", ".join(f"{k} parts ({method})" for k, method, _ in jobs))
    # The child writes beside the out_dirs (one file system, so the final renames are atomic); its log goes
    # elsewhere, kept when it fails.
    work = Path(tempfile.mkdtemp(prefix=f".{jobs[0][2].name}.", dir=parent))
    logs = Path(tempfile.mkdtemp(prefix=f"gnnbook-partition-{name}-"))
    progress = work / "progress.txt"
    bar = tqdm(total=None, desc=f"partition {name}: start", leave=False, disable=(size or (0,))[0] < LARGE_GRAPH_NODES,
               bar_format="{desc} [{elapsed}]")
    stage, succeeded = "start the child process", False
    try:
        child_jobs = [[k, method, str(work / f"part{i}")] for i, (k, method, _) in enumerate(jobs)]
        (work / "args.json").write_text(json.dumps(dict(dataset=dataset, seed=seed, options=options, jobs=child_jobs)))
        with ProcessGroup(deadline_s=deadline, log_dir=logs) as group:
            group.remove_on_death(work)  # the caller killed: its watchdog removes the half-built folders
            start_ranks(group, "gnnbook.distributed.partition_cache:build", 1, work / "args.json", work / "result.pt",
                        port=0, deadline_s=deadline, threads_per_rank=os.cpu_count() or 1, init_dist=False,
                        env={PROGRESS_ENV: str(progress)})
            child = group.members[0].popen
            try:
                while child.poll() is None:
                    group.check()
                    stage = _latest_stage(progress, stage, bar, name)
                    time.sleep(0.1)
                group.wait()
            except ProcessFailed as err:
                stage = _latest_stage(progress, stage, bar, name)
                raise _failed(err, what, stage, deadline, logs) from None
        for i, (_, _, out_dir) in enumerate(jobs):
            os.replace(work / f"part{i}", out_dir)
        succeeded = True
    finally:
        bar.close()
        shutil.rmtree(work, ignore_errors=True)
        if succeeded:
            shutil.rmtree(logs, ignore_errors=True)


def _latest_stage(progress: Path, stage: str, bar: tqdm, name: str) -> str:
    """The last stage the child reported; each one it reported since ``stage`` is shown in the caller's bar."""
    try:
        lines = progress.read_text().splitlines()
    except OSError:
        return stage
    for line in lines[lines.index(stage) + 1 if stage in lines else 0:]:
        bar.set_description(f"partition {name}: {line}")
    return lines[-1] if lines else stage


def _failed(err: ProcessFailed, what: str, stage: str, deadline: float, logs: Path) -> PartitionFailed:
    if err.returncode is None:
        why = (f"did not finish within its deadline of {deadline:.0f} s: it was in stage '{stage}' and was stopped "
               "(its threads' stacks are in its log, written just before; a 'Metis partitioning: other errors' after "
               "them is how METIS reports the SIGTERM that stopped it). A native deadlock does not repeat: run it "
               "again; if it stops "
               "again, give it more time with deadline_s=..., or partition from a terminal with "
               "`python -m gnnbook partition --dataset NAME --num-parts K`")
    else:
        why = f"failed in stage '{stage}': the child process {describe_exit(err.returncode)}"
        if err.returncode == -signal.SIGKILL:
            why += " (by the out-of-memory killer? `dmesg` says; a graph this size needs more memory)"
    return PartitionFailed(f"partitioning {what} {why}. Nothing was written to the cache or the output folder; "
                           f"the child's log is kept in {logs}\n--- last lines of its log ---\n{err.log_tail}",
                           stage, logs, err.returncode)


def cache_folder(dataset: str, num_parts: int, method: str, seed: int = 0, **dataset_options: Any) -> Path:
    """``<cache>/partitions/<graph>[-o<hash>]-<method>-<K>[-seed<S>]`` (seed 0 unmarked), where
    ``<hash>`` is the SHA-256 of the options' canonical JSON: distinct options never share a
    folder, and no option value can name a path outside the cache.

    Example:
        >>> cache_folder("powerlaw", 2, "random", num_nodes=3000).name  # doctest: +ELLIPSIS
        'powerlaw-o...-random-2'
    """
    if method not in METHODS:
        raise PartitionError(f"unknown partition method {method!r}; use one of {', '.join(METHODS)}")
    for label, value in (("num_parts", num_parts), ("seed", seed)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if label == "num_parts" else 0):
            raise PartitionError(f"{label} must be an integer >= {1 if label == 'num_parts' else 0}, got {value!r}")
    name = graph_name_for(dataset)
    if not GRAPH_NAME.fullmatch(name):
        raise PartitionError(f"dataset name {dataset!r} is not a plain name; see `python -m gnnbook datasets`")
    keyed = dict(dataset_options)
    if name in GENERATOR_VERSIONS:  # a changed generator never serves a partition of the old graph
        keyed["_generator"] = GENERATOR_VERSIONS[name]
    try:
        canonical = json.dumps(keyed, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise PartitionError(f"dataset options must be numbers or strings, got {dataset_options!r} ({err})") from None
    tag = f"-o{hashlib.sha256(canonical.encode()).hexdigest()[:16]}" if keyed else ""
    seed_tag = f"-seed{seed}" if seed else ""
    return cache_dir() / "partitions" / f"{name}{tag}-{method}-{num_parts}{seed_tag}"


@contextlib.contextmanager
def _locked(folder: Path):
    """Hold an exclusive lock on ``folder`` (a directory: no lock file to leave behind)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def cached_partition(dataset: str, num_parts: int, method: str = "metis", seed: int = 0,
                     **dataset_options: Any) -> Path:
    """The partition config of ``dataset`` in ``cache_dir()/partitions``,
    partitioning first when there is none (or the cached one is damaged).
    Concurrent callers wait for one build and all return it.  See
    :func:`open_cached_partition` for the partition opened."""
    return open_cached_partition(dataset, num_parts, method, seed, node_data=False, **dataset_options).config_path


def open_cached_partition(dataset: str, num_parts: int, method: str = "metis", seed: int = 0,
                          node_data: bool = True, **dataset_options: Any) -> OpenedPartition:
    """:func:`cached_partition`, opened (:func:`~gnnbook.distributed.partition_files.open_partition`):
    the config is read once, by the check that the cached copy is intact.

    Example:
        >>> open_cached_partition("cora", 2).num_parts  # doctest: +SKIP
        2
    """
    key = (num_parts, method)
    return open_cached_partitions(dataset, [key], seed, node_data, **dataset_options)[key]


def open_cached_partitions(dataset: str, requests: list[tuple[int, str]], seed: int = 0, node_data: bool = True,
                           **dataset_options: Any) -> dict[tuple[int, str], OpenedPartition]:
    """:func:`open_cached_partition` for several ``(num_parts, method)`` of one dataset: those not cached yet
    are built by one child, which generates or loads the graph once (chapter 8b's four partitions of the
    scale graph: one generation instead of four).

    Example:
        >>> opened = open_cached_partitions("cora", [(2, "metis"), (2, "random")])  # doctest: +SKIP
        >>> [p.num_parts for p in opened.values()]                                 # doctest: +SKIP
        [2, 2]
    """
    name = graph_name_for(dataset)
    folders = {tuple(r): cache_folder(dataset, r[0], r[1], seed, **dataset_options) for r in requests}
    opened = {r: _opened_if_intact(folder / f"{name}.json", node_data) for r, folder in folders.items()}
    if all(o is not None for o in opened.values()):
        return opened
    partitions = next(iter(folders.values())).parent
    with _locked(partitions):
        missing = []
        for r, folder in folders.items():
            opened[r] = opened[r] or _opened_if_intact(folder / f"{name}.json", node_data)  # another process built it?
            if opened[r] is None:
                if folder.resolve().parent != partitions.resolve() or partitions.name != "partitions":
                    raise PartitionError(f"refusing to replace {folder}: it is not a folder of the partition cache")
                shutil.rmtree(folder, ignore_errors=True)  # damaged, or from a version that recorded no digests
                missing.append(r)
        if missing:
            _build(dataset, [(k, method, folders[(k, method)]) for k, method in missing], seed, None, dataset_options)
        for r in missing:
            opened[r] = open_partition(folders[r] / f"{name}.json", node_data=node_data)
    return opened


def _opened_if_intact(config_path: Path, node_data: bool) -> OpenedPartition | None:
    """The cached partition opened, or None if it is missing, damaged or records no digests."""
    if not config_path.is_file():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PartitionWarning)
            opened = open_partition(config_path, node_data=node_data)
    except PartitionError:
        return None
    recorded = opened.config.get("gnnbook")
    return opened if isinstance(recorded, dict) and recorded.get("sha256") else None
