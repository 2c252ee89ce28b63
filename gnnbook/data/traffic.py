"""Traffic speed series on a sensor graph (spatio-temporal datasets).

Book: 2.4 applications (traffic forecasting).

Used in: chapters/09_outlook.ipynb.

``load_traffic("los-loop")`` returns the Los-loop speeds of Zhao et al.'s
T-GCN (IEEE T-ITS 2019): five-minute average speeds of 207 loop detectors
in Los Angeles (a subset of METR-LA) and their weighted adjacency.  Every
raw file's SHA-256 is checked before it is parsed (``gnnbook.data.files``).

Example:
    >>> data = load_traffic("los-loop")                 # doctest: +SKIP
    >>> tuple(data.speed.shape), data.num_edges         # doctest: +SKIP
    ((2016, 207), 1313)
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import torch

from .files import DatasetError, raw_files, read_verified, unknown_name
from .registry import TRAFFIC_DATASETS


@dataclass(frozen=True)
class TrafficData:
    """A speed series ``speed`` [steps, nodes] (float32) and its sensor graph."""

    name: str
    speed: torch.Tensor
    adjacency: torch.Tensor  # [nodes, nodes] float32, weighted, zero diagonal
    sensor_ids: list[str]

    @property
    def num_steps(self) -> int:
        return int(self.speed.shape[0])

    @property
    def num_nodes(self) -> int:
        return int(self.speed.shape[1])

    @property
    def num_edges(self) -> int:
        """Undirected edges (each stored in both directions in ``adjacency``)."""
        return int(torch.count_nonzero(torch.triu(self.adjacency, diagonal=1)))

    def graph(self):
        """The sensor graph as a DGLGraph with edge weights in ``edata["weight"]``."""
        import dgl

        src, dst = torch.nonzero(self.adjacency, as_tuple=True)
        g = dgl.graph((src, dst), num_nodes=self.num_nodes)
        g.edata["weight"] = self.adjacency[src, dst]
        return g


def traffic_names() -> list[str]:
    """Every name :func:`load_traffic` accepts."""
    return list(TRAFFIC_DATASETS)


def load_traffic(name: str, download: bool = True) -> TrafficData:
    """Load a traffic dataset by name (``los-loop``); see :class:`TrafficData`."""
    key = name.lower().replace("_", "-")
    spec = TRAFFIC_DATASETS.get(key)
    if spec is None:
        raise unknown_name("traffic dataset", name, traffic_names(),
                           "Node-classification graphs load with gnnbook.data.load_dataset.")
    paths = raw_files(spec, download=download)
    speed_text = read_verified(paths["los_speed.csv"], spec.files["los_speed.csv"]).decode()
    adj_text = read_verified(paths["los_adj.csv"], spec.files["los_adj.csv"]).decode()
    header, _, body = speed_text.partition("\n")
    sensor_ids = header.strip().split(",")
    speed = np.loadtxt(io.StringIO(body), delimiter=",", dtype=np.float32, ndmin=2)
    adjacency = np.loadtxt(io.StringIO(adj_text), delimiter=",", dtype=np.float32, ndmin=2)
    n = len(sensor_ids)
    if speed.shape[1] != n or adjacency.shape != (n, n):
        raise DatasetError(f"{name}: {n} sensor ids, speeds {speed.shape}, adjacency {adjacency.shape} do not agree")
    np.fill_diagonal(adjacency, 0.0)  # self-loops are the model's business, not the data's
    return TrafficData(key, torch.from_numpy(speed), torch.from_numpy(adjacency), sensor_ids)
