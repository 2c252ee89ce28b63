"""Checkpoints of the distributed trainer, and the rules for resuming from one.

Book: 8.3.4 cluster training (checkpoints and resuming).

Used in: no notebook directly.

A checkpoint records what it was trained with (model and optimiser settings,
world size, the partition's config digest); :func:`resume_state` refuses one
made under anything else, and ``resume=True`` with no checkpoint is an error
(``resume_if_present=True`` starts at epoch 0 then, and says so).  Files are
written to a temporary name and renamed, and read with ``weights_only=True``.

Example:
    >>> state = resume_state(TrainConfig(checkpoint_dir="/tmp/c", resume_if_present=True), 4,
    ...                      "cora.json")  # doctest: +SKIP
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from .config import TrainConfig
from .partition_files import OpenedPartition, open_partition

CHECKPOINT = "checkpoint.pt"
# What a resumed run must share with the run that saved the checkpoint (epochs may grow).
SHAPING_FIELDS = ("model", "fanouts", "batch_size", "weight_decay", "hidden", "seed", "feat_name", "label_name")


class CheckpointError(ValueError):
    """A checkpoint is missing, or belongs to another run; the message says which and what to do."""


def partition_digest(part_config: str | Path | OpenedPartition) -> str:
    """SHA-256 of the partition config (node ranges and, for gnnbook's, the files' digests);
    an opened partition's digest is the one taken when it was opened."""
    return open_partition(part_config, verify=False, node_data=False).config_digest


def identity(config: TrainConfig, world_size: int, part_config: str | Path | OpenedPartition) -> dict[str, Any]:
    """What a checkpoint of this run records about it (plain values only)."""
    return dict({f: getattr(config, f) for f in SHAPING_FIELDS}, lr=config.learning_rate, world_size=int(world_size),
                partition=partition_digest(part_config))


def save_checkpoint(directory: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``directory/checkpoint.pt`` through a temporary file of its own
    (created exclusively, with a random name, in the same folder) and a rename."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{CHECKPOINT}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
        os.replace(tmp, directory / CHECKPOINT)  # never a half-written checkpoint
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(directory: str | Path) -> dict[str, Any] | None:
    """The last checkpoint in ``directory`` (tensors and plain values only), or None."""
    path = Path(directory) / CHECKPOINT
    return torch.load(path, weights_only=True) if path.is_file() else None


def resume_state(config: TrainConfig, world_size: int,
                 part_config: str | Path | OpenedPartition) -> dict[str, Any] | None:
    """The checkpoint to continue from, or None to start at epoch 0; raises
    :class:`CheckpointError` when ``config.resume`` finds none or the one found
    was saved by a different run."""
    if not (config.resume or config.resume_if_present):
        return None
    state = load_checkpoint(config.checkpoint_dir)
    if state is None:
        if config.resume_if_present:
            return None
        raise CheckpointError(f"--resume: there is no checkpoint in {config.checkpoint_dir} ({CHECKPOINT}); check "
                              "--checkpoint-dir, or use --resume-if-present to start from epoch 0 when there is none")
    saved, now = state.get("identity"), identity(config, world_size, part_config)
    if not isinstance(saved, dict):
        raise CheckpointError(f"the checkpoint in {config.checkpoint_dir} records no configuration (an older "
                              "version wrote it); delete it or choose another --checkpoint-dir")
    differ = [f"{k}: checkpoint {saved.get(k)!r}, now {v!r}" for k, v in now.items() if saved.get(k) != v]
    if differ:
        what = "; ".join("partition: a different partition config" if d.startswith("partition") else d for d in differ)
        raise CheckpointError(f"the checkpoint in {config.checkpoint_dir} was saved by a different run ({what}); "
                              "resume with the same settings, world size and partition, or choose another "
                              "--checkpoint-dir")
    done = int(state.get("epoch", -1)) + 1
    if done >= config.epochs:
        raise CheckpointError(f"the checkpoint in {config.checkpoint_dir} has already trained {done} epochs and "
                              f"--epochs is {config.epochs}: resuming would train none; ask for more epochs "
                              f"(e.g. --epochs {done + config.epochs}) or choose another --checkpoint-dir")
    return state
