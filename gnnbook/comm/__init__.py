"""Communication (book 5.5): collectives with their bytes measured beside the formula.

- ``collectives``: ``Comm``, torch.distributed collectives with the bytes on the sockets (5.5);
- ``gloo_bytes``: what gloo's algorithms put on the wire, byte-exact (5.5.1);
- ``point_to_point``: only send/recv, measured; gloo's all-reduce timed (5.5.1);
- ``algorithms``: direct, tree and ring all-reduce from point-to-point messages, message fusion (5.5.1);
- ``uneven``: the deadlocks of collectives with uneven inputs, and their fixes (5.5.2);
- ``topology``: a GPU cluster's links as a cost model and a route planner (5.5.3);
- ``emulated_link``: a stated link's wire time emulated with sleeps on loopback (a model).
"""

__all__ = ["algorithms", "collectives", "emulated_link", "gloo_bytes", "point_to_point", "topology", "uneven"]
