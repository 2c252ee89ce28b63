"""A recommender's embedding table sharded across machines with DistDGL's ``DistEmbedding``.

Book: 2.4 applications (recommendation) at scale, beyond the book.

Used in: labs/lab10_recommendation.ipynb.

Industrial recommenders are embedding tables (one row per user and per item)
too large for one machine.  Here the table of a matrix-factorisation model
lives in DistDGL's key-value store, split like the nodes of the user-item
graph's partitions; each trainer looks up the rows of its share of every
batch (remote rows over RPC), and DGL's sparse Adam sends each row's gradient
to the trainer of the machine that owns it, which updates only the rows a
batch touched.

:func:`train_sharded_mf` partitions the training graph, runs the job on a
:class:`~gnnbook.distributed.LocalCluster` (one emulated machine per
partition) and returns the trained table in the original user/item order;
:func:`train_single_mf` is the same training in one process (DGL's
``NodeEmbedding`` and ``dgl.optim.SparseAdam``) for comparison.  Both draw
the same batches and negatives and start from the same table; every rank's
loss is its part of the batch's sum divided by the whole batch's size, so the
gradients the owners add up are the whole batch's mean gradient.

Example:
    >>> out = train_sharded_mf(split, dim=32, epochs=5)                     # doctest: +SKIP
    >>> rank_metrics(out["users"], out["items"], split.test,
    ...              split.seen("train", "val"))["recall"] > 0.1            # doctest: +SKIP
    True
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dgl
import torch
import torch.distributed as dist

from ..data.files import sha256_of
from .recsys import InteractionSplit, bpr_loss, sample_negatives

TABLE = "mf_table"
SHARDED_DEADLINE_S = 240.0  # train_sharded_mf's whole job: partitioning, servers, trainers


def _zeros(shape, dtype):  # DGL pickles init_func to the servers: a module-level function
    return torch.zeros(shape, dtype=dtype)


def initial_table(num_rows: int, dim: int, seed: int) -> torch.Tensor:
    """The table both runs start from: N(0, 0.1^2), seeded, in original row order."""
    return torch.randn(num_rows, dim, generator=torch.Generator().manual_seed(seed)) * 0.1


def batches(split: InteractionSplit, epoch: int, batch_size: int, seed: int):
    """The epoch's batches as (users, positive items, negative items), the same in every process."""
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(split.train.shape[1], generator=generator)
    seen = split.seen("train")
    for start in range(0, len(order), batch_size):
        users, positives = split.train[:, order[start:start + batch_size]]
        yield users, positives, sample_negatives(users, seen, generator)


def _step_loss(table_rows, users, positives, negatives, batch_total: int, l2: float):
    """Sum of this process's BPR terms and L2 penalty over the whole batch's size (rows: users, then items)."""
    n = len(users)
    if n == 0:  # a last batch smaller than the world leaves a process no share: it adds nothing (not NaN)
        return table_rows.sum() * 0.0
    u, p, q = table_rows[:n], table_rows[n:2 * n], table_rows[2 * n:]
    loss = bpr_loss((u * p).sum(1), (u * q).sum(1)) * n / batch_total
    return loss + l2 * (u.pow(2).sum() + p.pow(2).sum() + q.pow(2).sum()) / (2 * batch_total)


def _rows(users, positives, negatives, num_users: int) -> torch.Tensor:
    return torch.cat([users, positives + num_users, negatives + num_users])


def train_single_mf(split: InteractionSplit, dim: int = 32, epochs: int = 5, batch_size: int = 4096,
                    lr: float = 0.01, l2: float = 1e-3, seed: int = 0) -> dict[str, Any]:
    """Matrix factorisation in one process with DGL's ``NodeEmbedding`` and sparse Adam."""
    rows = split.num_users + split.num_items
    table = initial_table(rows, dim, seed)
    emb = dgl.nn.NodeEmbedding(rows, dim, f"single_{TABLE}_{os.getpid()}", init_func=lambda weight: weight.copy_(table))
    optimizer = dgl.optim.SparseAdam([emb], lr=lr)
    losses, epoch_s = [], []
    for epoch in range(epochs):
        start, total = time.perf_counter(), 0.0
        for users, positives, negatives in batches(split, epoch, batch_size, seed):
            loss = _step_loss(emb(_rows(users, positives, negatives, split.num_users)), users, positives, negatives,
                              len(users), l2)
            optimizer.zero_grad()  # without it DGL's sparse optimizers keep every lookup and apply it again
            loss.backward()
            optimizer.step()
            total += float(loss) * len(users)
        losses.append(total / split.train.shape[1])
        epoch_s.append(time.perf_counter() - start)
    weight = emb.weight
    return dict(users=weight[:split.num_users].clone(), items=weight[split.num_users:].clone(), losses=losses,
                epoch_s=epoch_s)


def _interaction_graph(split: InteractionSplit) -> dgl.DGLGraph:
    """The training graph with what :func:`partition_graph` expects (placeholder feat/label/masks)
    and each node's original row in ``orig``."""
    n = split.num_users + split.num_items
    users, items = split.train[0], split.train[1] + split.num_users
    g = dgl.graph((torch.cat([users, items]), torch.cat([items, users])), num_nodes=n)
    g.ndata["orig"] = torch.arange(n)
    g.ndata["feat"] = torch.zeros(n, 1)
    g.ndata["label"] = torch.zeros(n, dtype=torch.long)
    g.ndata["train_mask"] = torch.arange(n) < split.num_users  # METIS balances users across parts
    g.ndata["val_mask"] = g.ndata["test_mask"] = torch.zeros(n, dtype=torch.bool)
    return g


def _save_verified(obj: dict[str, torch.Tensor], path: Path) -> str:
    tmp = path.with_suffix(".part")
    torch.save(obj, tmp)
    os.replace(tmp, path)
    return sha256_of(path)


def _load_verified(path: str | Path, sha256: str) -> dict[str, torch.Tensor]:
    data = Path(path).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{path}: SHA-256 does not match the one given; the file was changed after it was written")
    return torch.load(io.BytesIO(data), weights_only=True)  # parse the bytes that were checked, not a second read


def train_sharded_mf(split: InteractionSplit, dim: int = 32, epochs: int = 5, batch_size: int = 4096,
                     lr: float = 0.01, l2: float = 1e-3, seed: int = 0, num_parts: int = 2) -> dict[str, Any]:
    """Train matrix factorisation with its table in a ``DistEmbedding`` over ``num_parts`` emulated
    machines (one trainer each); return the table in original order, the losses and epoch times."""
    from ..distributed.cluster import LocalCluster
    from ..distributed.partition_files import partition_graph

    if batch_size % num_parts:
        raise ValueError(f"batch_size {batch_size} must be a multiple of num_parts {num_parts} (equal shares)")
    with tempfile.TemporaryDirectory(prefix="sharded-mf-") as tmp:
        job = Path(tmp)
        part_config = partition_graph(_interaction_graph(split), "interactions", num_parts, "metis", job / "parts",
                                      seed=seed)
        inputs = job / "inputs.pt"
        digest = _save_verified({"train": split.train, "val": split.val, "test": split.test,
                                 "sizes": torch.tensor([split.num_users, split.num_items])}, inputs)
        out = job / "table.pt"
        args = dict(dim=dim, epochs=epochs, batch_size=batch_size, lr=lr, l2=l2, seed=seed)
        command = [sys.executable, "-m", "gnnbook.applications.sharded_embedding", "--part-config", str(part_config),
                   "--inputs", str(inputs), "--sha256", digest, "--out", str(out), "--args", json.dumps(args)]
        # the cluster's own folder: removed afterwards, or kept with the logs when the job fails
        with LocalCluster(part_config, num_trainers=1, deadline_s=SHARDED_DEADLINE_S) as cluster:
            cluster.run(command)
        result = torch.load(out, weights_only=True)
        meta = json.loads(out.with_suffix(".json").read_text())
    return dict(users=result["table"][:split.num_users], items=result["table"][split.num_users:], **meta)


def _trainer(part_config: str, inputs: dict[str, torch.Tensor], out: Path, dim: int, epochs: int, batch_size: int,
             lr: float, l2: float, seed: int) -> None:
    num_users, num_items = (int(v) for v in inputs["sizes"])
    split = InteractionSplit(num_users, num_items, inputs["train"], inputs["val"], inputs["test"])
    g = dgl.distributed.DistGraph("interactions", part_config=part_config)
    rank, world = dist.get_rank(), dist.get_world_size()
    n = g.num_nodes()
    orig = g.ndata["orig"][torch.arange(n)]            # DGL renumbers nodes by partition
    to_shuffled = torch.empty_like(orig)
    to_shuffled[orig] = torch.arange(n)
    emb = dgl.distributed.DistEmbedding(n, dim, TABLE, init_func=_zeros)
    if rank == 0:  # the same start as the single-process run
        emb._tensor[to_shuffled] = initial_table(n, dim, seed)
    g.barrier()
    optimizer = dgl.distributed.optim.SparseAdam([emb], lr=lr)
    book = g.get_partition_book()
    losses, epoch_s, remote_rows, rows_total = [], [], 0, 0
    for epoch in range(epochs):
        start, total = time.perf_counter(), torch.zeros(1)
        for users, positives, negatives in batches(split, epoch, batch_size, seed):
            share = slice(rank * len(users) // world, (rank + 1) * len(users) // world)
            rows = to_shuffled[_rows(users[share], positives[share], negatives[share], num_users)]
            remote_rows += int((book.nid2partid(rows) != book.partid).sum())
            rows_total += len(rows)
            loss = _step_loss(emb(rows), users[share], positives[share], negatives[share], len(users), l2)
            optimizer.zero_grad()  # without it DGL's sparse optimizers keep every lookup and apply it again
            loss.backward()
            optimizer.step()
            total += float(loss) * len(users)
        dist.all_reduce(total)
        losses.append(float(total) / split.train.shape[1])
        epoch_s.append(time.perf_counter() - start)
    g.barrier()
    if rank == 0:
        table = emb._tensor[to_shuffled]  # back to the original order
        _save_verified({"table": table}, out)
        tmp = out.with_suffix(".json.part")
        tmp.write_text(json.dumps(dict(losses=losses, epoch_s=epoch_s, world=world,
                                       remote_share=remote_rows / rows_total)))
        os.replace(tmp, out.with_suffix(".json"))
    g.barrier()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="matrix factorisation with a DistEmbedding table (one DistDGL job)")
    parser.add_argument("--part-config", required=True)
    parser.add_argument("--inputs", required=True, help="the interaction split (torch.save), checked by --sha256")
    parser.add_argument("--sha256", required=True)
    parser.add_argument("--out", required=True, help="the table trainer rank 0 writes (torch.save)")
    parser.add_argument("--args", required=True, help="JSON: dim, epochs, batch_size, lr, l2, seed")
    args = parser.parse_args(argv)
    dgl.distributed.initialize(os.environ.get("DGL_IP_CONFIG", ""))  # a server process stays in here
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    _trainer(args.part_config, _load_verified(args.inputs, args.sha256), Path(args.out), **json.loads(args.args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
