"""gnnbook: the helper package of the hands-on course on parallel and distributed GNN training.
One idea per module; the folders are the layers, lowest first (a module imports only from its own
layer and the layers below it; ``make lint`` checks it):

- ``base``: supervised processes (deadline, fail fast, nothing left behind), ranks joined by
  torch.distributed, memory and socket-byte measurement, the environment's pins;
- ``data``: real datasets (checksummed, offline-first) and seeded synthetic graphs;
- ``graph``: storage formats, receptive fields, memory sizing, GCN's normalisation (chapters 1-2);
- ``models``: GCN, GAT, GraphSAGE, GIN, GGNN, VGAE on DGL;
- ``training``: full-graph and minibatch loops, their results, both flows to convergence (chapter 4);
- ``comm``: collectives with their bytes measured, gloo's algorithms, a link model (5.5);
- ``ch3_parallel``, ``ch5_minibatch``, ``ch6_fullgraph``, ``ch7_systems``: the techniques of book
  chapters 3, 5, 6 and 7, one folder per chapter;
- ``distributed``: the real DistDGL runtime (partitions, launcher, emulated machines, trainer; chapter 8);
- ``applications``: recommendation, spatio-temporal forecasting, sharded embeddings (beyond the book);
- ``course``: claims, lab checks and grading, plots, release, the course run and its website;
- ``cli``: the command line on top (``python -m gnnbook --help``; ``__main__`` runs it).

Example:
    >>> import gnnbook
    >>> gnnbook.__version__
    '0.1.0'
"""
import os as _os

# DGL otherwise guesses a backend, warns, and writes ~/.dgl/config.json.
_os.environ.setdefault("DGLBACKEND", "pytorch")

__version__ = "0.1.0"
