"""Book chapter 5, minibatch distributed GNN training and its optimisations.

- ``prefetch`` and ``pipelining``: pipelining across minibatches (5.2.1, SALIENT);
- ``pushpull``: push, pull and the push-pull hybrid (5.2.2, NeutronStar);
- ``history``: historical embeddings (5.2.3, GNNAutoScale);
- ``p3``: computation decomposition against data parallelism (5.2.4, P3);
- ``sampling``: node-wise, layer-wise and subgraph samplers (5.3);
- ``caching``: feature-cache policies and a hit-rate simulator (5.4, PaGraph, GNNLab);
- ``feature_loading`` and ``uva_gather``: a minibatch's feature rows to the device, three paths (5.4, lab 12).

Communication (5.5) is its own layer below: :mod:`gnnbook.comm`.
"""

__all__ = ["caching", "feature_loading", "history", "p3", "pipelining", "prefetch", "pushpull", "sampling",
           "uva_gather"]
