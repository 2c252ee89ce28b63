"""Book chapter 6, full-graph distributed GNN training.

- ``subgraph``: subgraph parallelism with halo exchange (6.1.1);
- ``spmm``: operator parallelism, CAGNET's 1D and 2D distributed SpMM (6.1.2, 6.1.3);
- ``partitioners``: random, LDG, Fennel, METIS and a vertex cut, with their metrics (6.2.1);
- ``protocols``: pre-aggregation, cd-r, boundary sampling and Sancus-style skipping (6.2.2, 6.2.3),
  ``sancus`` holding the skipping exchange;
- ``stale``: PipeGCN's one-epoch-stale boundaries (6.3);
- ``async_ps``: asynchronous training on a parameter server with bounded staleness, no barrier (6.3).
"""

__all__ = ["async_ps", "partitioners", "protocols", "sancus", "spmm", "stale", "subgraph"]
