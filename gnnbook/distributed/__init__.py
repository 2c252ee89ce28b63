"""The real distributed DGL trainer: partitions, graph servers, trainers,
remote feature fetches, on a laptop or on a cluster.

Pieces, one module each:

- :mod:`~gnnbook.distributed.partition_files`: ``partition_graph`` (DGL's
  ``partition_graph``, METIS balancing training nodes and edges, or random),
  ``open_partition`` (every file's SHA-256 checked) and ``load_partition``
  (edge-cut fraction, replication factor, node / edge / training-node balance);
- :mod:`~gnnbook.distributed.partition_cache`: ``partition_dataset`` /
  ``cached_partition``: a dataset partitioned by name in a supervised child
  process (a deadline, its stages shown, a named error), kept in the cache;
- :mod:`~gnnbook.distributed.launcher`: builds the processes of a job (servers and
  trainers with the environment DGL's own launcher gives them), runs them under
  :class:`gnnbook.base.procs.ProcessGroup` (fail fast, deadline, no orphans, shared
  memory removed), ``render`` for a dry run;
- :mod:`~gnnbook.distributed.emulation`: **the one place where DGL is adapted** so
  that K partitions run as K machines on one host without root (DGL 2.1.0
  assumes one partition per host: every client would think it is machine 0
  and the servers' shared-memory segments would collide).  The launcher sets a
  machine id and a per-job, per-machine shared-memory prefix in the
  environment, and a ``sitecustomize`` on ``PYTHONPATH`` applies both to DGL
  in every process of the job, an unmodified DistDGL script included;
- :mod:`~gnnbook.distributed.netns`: with root, each emulated machine is a network
  namespace (own IP) plus a mount namespace (own ``/dev/shm``) instead, and
  stock DGL runs unadapted: the multi-host path, for real, on one host;
- :mod:`~gnnbook.distributed.trainer`: the DistDGL training script
  (``python -m gnnbook.distributed.trainer``): DistGraph, ``node_split`` with equal
  step counts, DistNodeDataLoader, an explicit gradient all-reduce over gloo,
  GraphSAGE or GAT, distributed evaluation, per-stage step times, a feature
  cache, checkpoints and ``--resume``,
  local vs remote feature rows, a JSON result; ``train_standalone`` runs it
  in one process (notebook debugging);
- :mod:`~gnnbook.distributed.stages`: the stages of a training step, timed, the
  explicit gradient all-reduce, and the count of sampled neighbours on other machines;
- :mod:`~gnnbook.distributed.feature_cache`: a trainer's cache of remote feature
  rows (policies degree and presample), fetching only misses from the servers;
- :mod:`~gnnbook.distributed.baseline`: the same model trained in one process with
  plain DGL sampling, for comparison;
- :mod:`~gnnbook.distributed.cluster`: ``LocalCluster`` / ``Cluster``, the API a
  notebook uses; :mod:`~gnnbook.distributed.commands`: ``python -m gnnbook
  partition | dist-train | launch``;
- :mod:`~gnnbook.distributed.config`: one run's settings (``TrainConfig``);
  :mod:`~gnnbook.distributed.store`: the job's rendezvous store, on loopback;
  :mod:`~gnnbook.distributed.progress`: a running job's epochs shown in the caller;
- :mod:`~gnnbook.distributed.checkpoint`: checkpoints and the rules for resuming;
  :mod:`~gnnbook.distributed.repeatable`: the servers' random streams seeded by the trainers;
  :mod:`~gnnbook.distributed.leftovers`: what a notebook's jobs left behind;
- :mod:`~gnnbook.distributed.demo_interfaces`: DistGraph, DistTensor, DistEmbedding and the
  KVStore exercised (chapter 8); :mod:`~gnnbook.distributed.scale_runs`: one graph on 1-4
  emulated machines under a memory budget (8b, ``make scale``);
- ``_site``: the folder of the ``sitecustomize`` that adapts DGL in every emulated machine's process.

Example:
    >>> from gnnbook.distributed import LocalCluster, TrainConfig, cached_partition  # doctest: +SKIP
    >>> part_config = cached_partition("cora", num_parts=2)                  # doctest: +SKIP
    >>> with LocalCluster(part_config, num_trainers=2) as cluster:           # doctest: +SKIP
    ...     result = cluster.train(TrainConfig(model="sage", epochs=20))
    >>> result["steps_per_trainer"]                                          # doctest: +SKIP
    [100, 100, 100, 100]

The same job on real machines: write a host file (``IP [PORT]`` per line,
one per partition) and use ``Cluster(part_config, "hosts.txt")`` or
``python -m gnnbook dist-train ... --hosts hosts.txt`` (add ``--dry-run`` to
see every command and its environment first).
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "partition_dataset": "partition_cache", "partition_graph": "partition_files", "cached_partition": "partition_cache",
    "load_partition": "partition_files", "PartitionReport": "partition_files", "PartitionError": "partition_files",
    "open_partition": "partition_files", "open_cached_partition": "partition_cache",
    "OpenedPartition": "partition_files",
    "plan_job": "launcher", "render": "launcher", "run_job": "launcher", "Job": "launcher",
    "JobFailed": "launcher", "LaunchError": "launcher", "read_host_file": "launcher",
    "TrainConfig": "config", "train_standalone": "trainer", "load_checkpoint": "trainer",
    "train_single_process": "baseline", "train_single_process_seeds": "baseline",
    "whole_graph": "baseline",
    "LocalCluster": "cluster", "Cluster": "cluster", "EmulatedHosts": "netns", "netns_available": "netns",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # Lazy: the launcher's sitecustomize imports gnnbook.distributed.emulation in every
    # process of a job, which must not pay for importing DGL and torch here.
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
