"""Book chapter 7, GNN systems.

- ``progmodels``: one layer tensor-, graph- and vertex-centric, PageRank on the same engines (7.1, 7.2);
- ``catalogue``: the surveyed systems as data, with sources (7.3-7.6);
- ``chooser``: the training method chosen from memory sizing (7.7).
"""

__all__ = ["catalogue", "chooser", "progmodels"]
