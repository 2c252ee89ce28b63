"""Determinism: one seed for Python, NumPy, torch and DGL, and DGL's sampler on one thread.

Book: none (determinism for every chapter).

Used in: chapters/01_introduction.ipynb, chapters/02_gnn_models.ipynb,
chapters/03_distributed_ml.ipynb, chapters/04_gnn_training.ipynb,
chapters/05a_minibatch_training_and_sampling.ipynb, chapters/05d_communication.ipynb,
chapters/05e_sampler_accuracy.ipynb, chapters/05g_historical_embeddings.ipynb,
chapters/08_dgl_practice.ipynb, chapters/09_outlook.ipynb, labs/lab02_message_passing.ipynb,
labs/lab03_collectives.ipynb, labs/lab04_minibatch.ipynb, labs/lab05_feature_cache.ipynb.

Every notebook and test seeds through :func:`set_seed`, so the same notebook gives the same
numbers twice on one machine; :func:`sampling_on_one_thread` makes DGL's neighbour sampling
repeat too (its OpenMP threads each draw from their own random stream).

Example:
    >>> import torch
    >>> set_seed(0); a = torch.rand(2)
    >>> set_seed(0); bool((torch.rand(2) == a).all())
    True
"""
from __future__ import annotations

import contextlib
import random
from typing import Iterator

import dgl
import numpy as np
import torch

__all__ = ["set_seed", "sampling_on_one_thread"]


def set_seed(seed: int) -> None:
    """Seed Python, NumPy, torch and DGL so a run repeats exactly on one machine."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    dgl.seed(seed)


@contextlib.contextmanager
def sampling_on_one_thread() -> Iterator[None]:
    """Run DGL's neighbour sampling on one thread inside the block.

    DGL 2.1's sampler splits work over OpenMP threads, each with its own random
    stream, so with several threads the same ``dgl.seed`` draws different
    neighbours from run to run; on one thread it repeats exactly.
    """
    from dgl.utils.internal import get_num_threads, set_num_threads

    previous = get_num_threads()
    set_num_threads(1)
    try:
        yield
    finally:
        set_num_threads(previous)
