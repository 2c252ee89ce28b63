"""What gloo's algorithms put on the wire, per rank: a byte-exact model.

Book: 5.5.1 collective communication (gloo's algorithms on the wire).

Used in: chapters/03_distributed_ml.ipynb, chapters/05d_communication.ipynb,
chapters/06a_fullgraph_parallelism.ipynb, chapters/06c_sync_and_async_protocols.ipynb,
labs/lab03_collectives.ipynb, labs/lab06_halo_exchange.ipynb.

:mod:`gnnbook.comm.collectives` compares it with the bytes the kernel counted on the
sockets (:mod:`gnnbook.base.wire`).  The algorithms are those of gloo's sources
(``gloo/*.cc``) as torch 2.2's gloo backend calls them; the measurements in
``tests/test_comm.py`` match this model to the byte on 2 and 3 ranks.

- ``all_reduce``: ring (``gloo/allreduce.cc``).  The tensor is cut into 2N
  segments of ``ceil(S / 2N)`` bytes rounded up to whole elements; rank c
  owns segments 2c and 2c+1 (its *chunk*; the last chunks may be short or
  empty).  Reduce-scatter sends every chunk but one's own, all-gather every
  chunk but the left neighbour's, one message per non-empty segment:
  ``2S - chunk[r] - chunk[r-1]`` bytes, i.e. ``2(N-1)/N * S`` up to rounding.
  (Beyond 2N x 1 MiB gloo cuts 1 MiB segments; the course's tensors stay below.)
- ``all_gather_into_tensor``: ring, each shard in two halves: ``(N-1) * shard``
  bytes in ``2(N-1)`` messages each way.
- ``reduce_scatter_tensor``: torch 2.2's gloo has no reduce-scatter of its
  own; it all-reduces the whole input (the ring above) and rank 0 then sends
  every other rank its shard -- twice the ring reduce-scatter's
  ``(N-1)/N * S``.  (Identified from the measured bytes, which this model matches.)
- ``broadcast``: binomial tree (``gloo/broadcast.cc``): the root sends the
  whole tensor to ``ceil(log2 N)`` ranks at most; everyone else receives it once.
- ``all_to_all_single``: one message to and from every other rank
  (``gloo/alltoallv.cc``), exactly the split sizes.
- ``barrier``: dissemination barrier, ``ceil(log2 N)`` empty messages each way.
- ``send``/``recv``: one message.

Each message costs 48-byte headers on top of its payload (gloo's TCP
``Op`` preamble, six 8-byte fields): the sender writes two (a "ready to send"
notice and the data's header) and the receiver one ("ready to receive").

Example:
    >>> v = all_reduce(4000, 4, world_size=2, rank=0)
    >>> v.sent, v.messages_sent       # 2(N-1)/N * 4000 bytes in 4 segments
    (4000, 4)
    >>> v.wire_sent                   # + 48 B x (2 per message sent + 1 per message received)
    4576
"""
from __future__ import annotations

import math
from dataclasses import dataclass

PREAMBLE_BYTES = 48  # gloo/transport/tcp/pair.h: struct Op's preamble, 6 x size_t


@dataclass(frozen=True)
class Volume:
    """Payload bytes and messages one rank sends and receives in one call."""
    sent: int = 0
    received: int = 0
    messages_sent: int = 0
    messages_received: int = 0

    def __add__(self, other: "Volume") -> "Volume":
        return Volume(self.sent + other.sent, self.received + other.received,
                      self.messages_sent + other.messages_sent, self.messages_received + other.messages_received)

    @property
    def wire_sent(self) -> int:
        """Payload plus gloo's headers this rank writes."""
        return self.sent + PREAMBLE_BYTES * (2 * self.messages_sent + self.messages_received)

    @property
    def wire_received(self) -> int:
        return self.received + PREAMBLE_BYTES * (self.messages_sent + 2 * self.messages_received)


def send(nbytes: int) -> Volume:
    return Volume(sent=nbytes, messages_sent=1)


def recv(nbytes: int) -> Volume:
    return Volume(received=nbytes, messages_received=1)


def _ring_segments(size_bytes: int, element_size: int, world_size: int) -> list[int]:
    """Lengths of gloo's 2N ring segments (gloo/allreduce.cc)."""
    n2 = 2 * world_size
    seg = -(-(-(-size_bytes // n2)) // element_size) * element_size  # ceil(S / 2N), rounded up to elements
    return [max(0, min(seg, size_bytes - i * seg)) for i in range(n2)]


def ring_rounding_bound(element_size: int, world_size: int) -> int:
    """How far one ring all-reduce's payload per rank can be from ``2(N-1)/N * S`` bytes: a full
    chunk (two segments rounded up to whole elements) exceeds ``S/N`` by < 2 elements + 2 bytes, and
    the last non-empty chunk falls short by at most N-1 times that; two chunks: < 4N elements."""
    return 4 * world_size * element_size


def all_reduce(size_bytes: int, element_size: int, world_size: int, rank: int) -> Volume:
    if world_size == 1 or size_bytes == 0:
        return Volume()
    segs = _ring_segments(size_bytes, element_size, world_size)
    chunk = [segs[2 * c: 2 * c + 2] for c in range(world_size)]

    def moved(skip: int) -> tuple[int, int]:   # every chunk but `skip`: bytes, non-empty segments
        parts = [s for c in range(world_size) if c != skip % world_size for s in chunk[c]]
        return sum(parts), sum(1 for s in parts if s > 0)

    rs_out, ag_out = moved(rank), moved(rank - 1)              # to the left neighbour
    rs_in, ag_in = moved(rank + 1), moved(rank)                # from the right neighbour
    return Volume(rs_out[0] + ag_out[0], rs_in[0] + ag_in[0], rs_out[1] + ag_out[1], rs_in[1] + ag_in[1])


def all_gather(shard_bytes: int, world_size: int) -> Volume:
    steps = world_size - 1
    return Volume(steps * shard_bytes, steps * shard_bytes, 2 * steps, 2 * steps)


def reduce_scatter(full_bytes: int, element_size: int, world_size: int, rank: int) -> Volume:
    if world_size == 1:
        return Volume()
    shard = full_bytes // world_size
    scatter = (Volume(sent=(world_size - 1) * shard, messages_sent=world_size - 1) if rank == 0
               else Volume(received=shard, messages_received=1))
    return all_reduce(full_bytes, element_size, world_size, rank) + scatter


def broadcast(nbytes: int, world_size: int, rank: int, root: int = 0) -> Volume:
    vrank, dim = (rank - root) % world_size, math.ceil(math.log2(world_size)) if world_size > 1 else 0
    out, mask = Volume(), (1 << dim) - 1
    for i in range(dim):   # gloo/broadcast.cc, virtual rank 0 = root
        mask ^= 1 << i
        if vrank & mask or (vrank ^ (1 << i)) >= world_size:
            continue
        out = out + (send(nbytes) if vrank & (1 << i) == 0 else recv(nbytes))
    return out


def all_to_all(sent_to_others: int, received_from_others: int, world_size: int) -> Volume:
    return Volume(sent_to_others, received_from_others, world_size - 1, world_size - 1)


def barrier(world_size: int) -> Volume:
    rounds = math.ceil(math.log2(world_size)) if world_size > 1 else 0
    return Volume(0, 0, rounds, rounds)
