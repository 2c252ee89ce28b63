"""Repeatable sampling in a DistDGL job: the graph servers' random streams, seeded by the trainers.

Book: 5.3.2 distributed graph sampling (seeded servers).

Used in: no notebook directly.

A DistDGL trainer samples the neighbours of its own partition's nodes in its own
process (seeded with ``dgl.seed``), but sends the nodes of other partitions to
their machines' graph servers, which sample with their own random streams, never
seeded.  Two runs with the same seed therefore draw different neighbours for
every remote node, and an A/B comparison of two jobs (a cache against none, say)
mixes the effect under test with sampling noise.

With ``TrainConfig(repeatable_sampling=True)`` every trainer, before the
cache's presampling pass and at the start of each epoch, sends a
:class:`SeedRequest` to every server of the other machines (a DGL RPC service
of our own, registered in servers and trainers alike, since both import this
module): the server seeds ``dgl.seed`` and samples on one thread from then on
(DGL 2.1 gives each OpenMP thread its own stream).  The trainer samples on one
thread from then on too.  (Seeding only at the epochs was not enough: a
presampling pass on two threads left the next epoch's draws different.)

The trainer also re-seeds its own stream before every minibatch
(:func:`seed_own_sampling`): DGL's feature pull (``fast_pull``) draws the server
it asks from the same thread-local stream that samples the local partition, so
a job that pulls remote rows at fewer steps (one with a cache) would otherwise
sample differently from then on.  The requests a server receives then come
in a fixed order when it serves exactly one remote trainer, which is the case
for two machines with one trainer each: :func:`check_repeatable` refuses other
layouts rather than promise what it cannot keep.

Example:
    >>> check_repeatable(num_machines=2, trainers_per_machine=1)
    >>> check_repeatable(num_machines=3, trainers_per_machine=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: repeatable sampling needs 2 machines with 1 trainer each (...); this job has 3 machines ...
"""
from __future__ import annotations

from dgl import seed as dgl_seed
from dgl.distributed import rpc
from dgl.utils.internal import set_num_threads

SEED_SERVICE_ID = 90917  # not used by DGL 2.1.0 (its services are below 10000 or named in rpc.py)


class _SeedState:
    """The one field both messages carry (DGL serialises what ``__getstate__`` returns)."""

    def __init__(self, seed: int):
        self.seed = seed

    def __getstate__(self):
        return self.seed

    def __setstate__(self, state):
        self.seed = state


class SeedRequest(_SeedState, rpc.Request):
    """Seed the receiving server's sampling stream (and pin its sampler to one thread)."""

    def process_request(self, server_state):
        set_num_threads(1)
        dgl_seed(self.seed)
        return SeedResponse(self.seed)


class SeedResponse(_SeedState, rpc.Response):
    """The server's acknowledgement, carrying the seed it took."""


rpc.register_service(SEED_SERVICE_ID, SeedRequest, SeedResponse)


def check_repeatable(num_machines: int, trainers_per_machine: int, servers_per_machine: int = 1,
                     samplers_per_trainer: int = 0) -> None:
    """Raise ValueError unless the layout lets every server see one remote trainer.

    One server per machine: DGL's ``remote_call`` reads each target as a machine
    and picks a random server of it, so the seed would reach one server of several.
    No sampler processes: they sample in DGL's pool, which only the trainer seeds."""
    if num_machines != 2 or trainers_per_machine != 1:
        raise ValueError(
            "repeatable sampling needs 2 machines with 1 trainer each (every server then serves one remote "
            f"trainer, in a fixed order); this job has {num_machines} machines with {trainers_per_machine} "
            "trainer(s) each")
    if servers_per_machine != 1:
        raise ValueError(f"repeatable sampling needs 1 graph server per machine, this job has {servers_per_machine}: "
                         "DGL sends each request to a random server of a machine, so the others would go unseeded; "
                         "drop --num-servers or --repeatable-sampling")
    if samplers_per_trainer != 0:
        raise ValueError(f"repeatable sampling needs sampling in the trainer (--num-samplers 0), this job has "
                         f"{samplers_per_trainer} sampler process(es) per trainer, whose draws nobody seeds; "
                         "drop --num-samplers or --repeatable-sampling")


SEED_TIMEOUT_MS = 60_000  # a server that does not answer fails the trainer instead of hanging it


def seed_remote_servers(seed: int, own_machine: int, num_machines: int) -> None:
    """Seed the server of every other machine with ``seed`` and wait (at most
    SEED_TIMEOUT_MS) until each has done it; then pin this trainer's own
    (local-partition) sampling to one thread too."""
    targets = [(m, SeedRequest(seed)) for m in range(num_machines) if m != own_machine]
    replies = rpc.remote_call(targets, timeout=SEED_TIMEOUT_MS)
    if [r.seed for r in replies] != [seed] * len(targets):
        raise RuntimeError(f"a graph server did not take the sampling seed {seed} (replies {replies})")
    set_num_threads(1)


def seed_own_sampling(epoch_seed: int, step: int) -> None:
    """Seed this trainer's DGL stream for minibatch ``step``, whatever drew from it before."""
    dgl_seed((epoch_seed * 7919 + step) % 2**31)
