"""User-item interactions for recommendation: MovieLens ``ml-latest-small``.

Book: 2.4 applications (recommendation).

Used in: no notebook directly.

``load_ratings("ml-latest-small")`` returns the 100,004 ratings that 671
users gave 9,066 movies (Harper & Konstan, ACM TiiS 2015), with users and
movies renumbered ``0..n-1`` in the order of their ids.  Every raw file's
SHA-256 is checked before it is parsed (``gnnbook.data.files``); the
licence's README.txt is verified too, because the terms require it to stay
beside the data.

Example:
    >>> data = load_ratings("ml-latest-small")             # doctest: +SKIP
    >>> data.num_users, data.num_items, data.num_ratings    # doctest: +SKIP
    (671, 9066, 100004)
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import numpy as np
import torch

from .files import DatasetError, raw_files, read_verified, unknown_name
from .registry import RATINGS_DATASETS


@dataclass(frozen=True)
class Ratings:
    """One rating per row: ``user`` and ``item`` (0-based, int64), ``rating`` (stars,
    float32) and ``timestamp`` (Unix seconds, int64); ``titles[item]`` names the item."""

    name: str
    user: torch.Tensor
    item: torch.Tensor
    rating: torch.Tensor
    timestamp: torch.Tensor
    num_users: int
    num_items: int
    titles: list[str]

    @property
    def num_ratings(self) -> int:
        return int(self.user.numel())

    @property
    def density(self) -> float:
        """Share of the user x item matrix that is rated."""
        return self.num_ratings / (self.num_users * self.num_items)


def ratings_names() -> list[str]:
    """Every name :func:`load_ratings` accepts."""
    return list(RATINGS_DATASETS)


def load_ratings(name: str, download: bool = True) -> Ratings:
    """Load a ratings dataset by name (``ml-latest-small``); see :class:`Ratings`."""
    spec = RATINGS_DATASETS.get(name.lower().replace("_", "-"))
    if spec is None:
        raise unknown_name("ratings dataset", name, ratings_names(),
                           "Graphs load with gnnbook.data.load_dataset, traffic series with load_traffic.")
    paths = raw_files(spec, download=download)
    read_verified(paths["README.txt"], spec.files["README.txt"])  # the licence travels with the data
    table = np.loadtxt(io.StringIO(read_verified(paths["ratings.csv"], spec.files["ratings.csv"]).decode()),
                       delimiter=",", skiprows=1, ndmin=2)
    if table.shape[1] != 4:
        raise DatasetError(f"{name}: ratings.csv has {table.shape[1]} columns, expected userId,movieId,rating,timestamp")
    user_ids, user = np.unique(table[:, 0].astype(np.int64), return_inverse=True)
    item_ids, item = np.unique(table[:, 1].astype(np.int64), return_inverse=True)
    movies = read_verified(paths["movies.csv"], spec.files["movies.csv"]).decode()
    title_of = {int(row["movieId"]): row["title"] for row in csv.DictReader(io.StringIO(movies))}
    return Ratings(name=spec.name, user=torch.from_numpy(user), item=torch.from_numpy(item),
                   rating=torch.from_numpy(table[:, 2].astype(np.float32)),
                   timestamp=torch.from_numpy(table[:, 3].astype(np.int64)),
                   num_users=len(user_ids), num_items=len(item_ids),
                   titles=[title_of.get(int(i), f"movie {i}") for i in item_ids])
