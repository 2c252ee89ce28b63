"""Full-graph distributed GNN training (book chapter 6), one module per idea: ``subgraph``
(subgraph parallelism with halo exchange, 6.1.1) and ``spmm`` (operator parallelism: CAGNET's
1D and 2D distributed sparse-dense product, 6.1.2)."""
