"""DistDGL's data interfaces, exercised for real: ``python -m gnnbook.distributed.demo_interfaces``.

Book: 8.3.2 distributed data interfaces.

Used in: chapters/08_dgl_practice.ipynb.

A DistDGL script like :mod:`gnnbook.distributed.trainer`, run by the launcher in every
server and trainer process (chapter 8.3.2).  Each trainer

1. opens the :class:`dgl.distributed.DistGraph` and reads, through the
   partition book, which nodes its machine owns; it reads feature rows of its
   own nodes (shared memory) and of another machine's nodes (RPC);
2. creates a :class:`dgl.distributed.DistTensor` partitioned like the nodes,
   writes ``rank + 1`` into the rows of the nodes its machine owns, waits at a
   barrier, and reads the whole tensor back: every row holds its owner's mark;
3. talks to the key-value store directly: ``push`` rows of that tensor and
   ``pull`` them back (a DistTensor's ``t[ids] = x`` / ``t[ids]`` are exactly
   these two calls);
4. trains a :class:`dgl.distributed.DistEmbedding` one step with DGL's
   ``SparseAdagrad``: only the rows some trainer looked up change.

Trainer rank 0 writes what every rank saw as JSON (``--out``).  The course's
trainer runs the same exercise before it trains when asked
(``TrainConfig(exercise_interfaces=True)``: chapter 8 compares what it saw with
the partition files without starting a job of its own).

Example:
    >>> with LocalCluster(cached_partition("cora", 2)) as cluster:  # doctest: +SKIP
    ...     cluster.run([sys.executable, "-m", "gnnbook.distributed.demo_interfaces", "--part-config", cfg,
    ...                  "--out", "x.json"])
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import dgl
import torch
import torch.distributed as dist

from .partition_files import open_partition

LOOKUPS = 4  # embedding rows each trainer looks up per partition


def _zeros(shape, dtype):
    return torch.zeros(shape, dtype=dtype)


def exercise(g: dgl.distributed.DistGraph) -> dict[str, Any]:
    """Run the four demonstrations on the DistGraph of an initialised DistDGL client; return what this
    rank saw.  Every trainer of the job must call it (it waits at barriers)."""
    book = g.get_partition_book()
    rank, world = dist.get_rank(), dist.get_world_size()
    me = book.partid
    owned = book.partid2nids(me)
    other = book.partid2nids((me + 1) % book.num_partitions())
    local = g.local_partition
    seen: dict[str, Any] = dict(rank=rank, machine=int(me), num_nodes=g.num_nodes(), num_edges=g.num_edges(),
                                owned_nodes=len(owned), local_partition_nodes=local.num_nodes(),
                                halo_nodes=int((local.ndata["inner_node"] == 0).sum()))
    # 1. features: own rows from shared memory, another machine's rows over RPC
    probe = torch.cat([owned[:3], other[:3]])
    seen["feature_probe_ids"] = probe.tolist()
    seen["feature_probe_owner"] = book.nid2partid(probe).tolist()
    rows = g.ndata["feat"][probe]
    seen["feature_probe_checksums"] = (rows * torch.arange(1, rows.shape[1] + 1)).sum(1).tolist()

    # 2. a DistTensor: each machine writes its own rows, everyone reads all rows
    policy = g.get_node_partition_policy("_N")
    marks = dgl.distributed.DistTensor((g.num_nodes(), 1), torch.float32, "owner_mark", init_func=_zeros,
                                       part_policy=policy)
    marks[owned] = torch.full((len(owned), 1), float(me + 1))  # trainers of one machine write the same
    g.barrier()
    every = marks[torch.arange(g.num_nodes())].flatten()
    seen["owner_mark_counts"] = {str(int(v)): int((every == v).sum()) for v in every.unique()}
    seen["owner_mark_matches_partition_book"] = bool(
        (every.long() == book.nid2partid(torch.arange(g.num_nodes())) + 1).all())

    # 3. the key-value store underneath: push rows, pull them back
    kv = dgl.distributed.kvstore.get_kvstore()
    seen["kvstore_names"] = sorted(n for n in kv.data_name_list() if "owner_mark" in n or "feat" in n)
    g.barrier()  # everyone has read the marks before anyone overwrites them
    ids = torch.cat([owned[rank::world][:2], other[rank::world][:2]])  # disjoint across ranks
    kv.push(marks.kvstore_key, ids, torch.full((len(ids), 1), 100.0 + rank))
    g.barrier()
    pulled = kv.pull(marks.kvstore_key, ids).flatten()
    seen["kv_pushed_ids"] = ids.tolist()
    seen["kv_pulled"] = pulled.tolist()

    # 4. a DistEmbedding trained one sparse step
    emb = dgl.distributed.DistEmbedding(g.num_nodes(), 4, "demo_embedding", init_func=_zeros)
    optimizer = dgl.distributed.optim.SparseAdagrad([emb], lr=0.1)
    lookup = torch.cat([owned[:LOOKUPS], other[:LOOKUPS]])
    loss = (emb(lookup) - 1.0).pow(2).sum()  # pulls every row towards 1
    loss.backward()
    optimizer.step()
    g.barrier()
    rows = emb._tensor[torch.arange(g.num_nodes())]
    changed = (rows != 0).any(1).nonzero().flatten()
    seen["embedding_lookup_ids"] = lookup.tolist()
    seen["embedding_changed_ids"] = changed.tolist()
    seen["embedding_row_mean_after_step"] = float(rows[changed].mean()) if len(changed) else 0.0
    return seen


def exercise_all(g: dgl.distributed.DistGraph) -> list[dict[str, Any]]:
    """:func:`exercise` on every trainer; every rank gets the list of what each rank saw (rank order)."""
    seen = exercise(g)
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, seen)
    return every


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="exercise DistGraph, DistTensor, DistEmbedding and the KVStore")
    parser.add_argument("--part-config", required=True)
    parser.add_argument("--out", required=True, help="JSON file trainer rank 0 writes")
    args = parser.parse_args(argv)
    dgl.distributed.initialize(os.environ.get("DGL_IP_CONFIG", ""))  # a server stays here
    dist.init_process_group("gloo")
    partition = open_partition(args.part_config, verify=False, node_data=False)   # the launcher checked it
    every = exercise_all(dgl.distributed.DistGraph(partition.graph_name, part_config=str(partition.config_path)))
    if dist.get_rank() == 0:
        tmp = Path(args.out).with_suffix(".part")
        tmp.write_text(json.dumps(every, indent=1))
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
