"""gnnbook: the helper package of the hands-on course on parallel and
distributed GNN training.  One idea per module, in layers:

- ``data``: real datasets (checksummed, offline-first) and synthetic graphs
- ``models``: GCN, GAT, GraphSAGE, GIN, GGNN, VGAE on DGL
- ``train``: full-graph loops and result records; ``flows``: full-graph vs minibatch,
  both to convergence; ``memory``: peak-memory probes; ``procs``: supervised process
  groups (deadline, fail fast, nothing left behind) and ``reaper``, their watchdog;
  ``leftovers``: processes and shared memory a notebook's jobs left behind
- systems techniques: ``neighbourhood`` (receptive fields), ``sizing`` (memory
  calculator), ``graph_formats`` (COO/CSR/CSC), ``minibatch`` (sampled training),
  ``wire`` (bytes measured on TCP sockets), ``gloo_bytes`` (gloo's algorithms' wire
  volume), ``comm`` (collectives with measured bytes, link cost model), ``parallel``
  (data, model, pipeline, tensor, expert, sharded parallelism; BSP/ASP/SSP)
- ``distributed``: the distributed DGL runtime (partition, launcher, trainer)
- ``claims``: each notebook's published-vs-measured claims, one record for the course;
  ``labcheck``: lab checks that refuse the package's reference implementations
- ``viz``, ``teaching`` (nbgrader release, autograding, the course run, the website)
  and ``cli`` on top (``python -m gnnbook --help``)

Example:
    >>> import gnnbook
    >>> gnnbook.__version__
    '0.1.0'
"""
import os as _os

# DGL otherwise guesses a backend, warns, and writes ~/.dgl/config.json.
_os.environ.setdefault("DGLBACKEND", "pytorch")

__version__ = "0.1.0"
