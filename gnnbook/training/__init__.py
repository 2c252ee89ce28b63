"""Training loops (book chapter 4, used by every chapter after it).

- ``train``: full-graph node classification with early stopping, VGAE link prediction, result records;
- ``minibatch``: neighbour-sampled minibatch training and its dependency counts (4.1, 4.2);
- ``flows``: full-graph against minibatch training, both to convergence (4.1).
"""

__all__ = ["flows", "minibatch", "train"]
