"""Bytes on the wire, measured from this process's own TCP sockets.

Book: 5.5 communication (bytes measured on the sockets).

Used in: no notebook directly.

gloo (torch.distributed on CPU) and DistDGL's RPC move tensors over TCP.  The
kernel keeps, for every TCP socket, the payload bytes it sent and received
(``tcpi_bytes_sent``, ``tcpi_bytes_retrans`` and ``tcpi_bytes_received`` in
``struct tcp_info``, Linux >= 4.19), whatever system call wrote them.  A
process finds its sockets in ``/proc/self/fd`` and asks each with
``getsockopt(TCP_INFO)``.  "Sent" here is ``bytes_sent - bytes_retrans``:
each payload byte once, even when TCP had to send it again (it does, now and
then, even on loopback: a tail-loss probe re-sends the last segment when an
acknowledgement is late on a busy machine).

What this does not see, so a measurement stands beside a formula with a
stated overhead: TCP/IP headers (payload only), and sockets closed during the
measured interval (gloo keeps its connections open for the life of the
process group, so collectives are fully counted).  It sees *every* TCP socket
of the process; pass ``exclude`` (addresses) to leave some out, e.g. the
rendezvous store's connection (:mod:`gnnbook.comm.collectives` does).

Per-process ``/proc/self/io`` is *not* a byte counter for sockets: it misses
``send``/``sendmsg``.

Example:
    >>> with WireCounter() as wire:
    ...     pass                      # run collectives here
    >>> wire.sent, wire.received      # payload bytes this process put on / took off TCP
    (0, 0)
"""
from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass, field
from typing import Iterable

# Offsets in struct tcp_info (include/uapi/linux/tcp.h); all three fields are u64.
_BYTES_RECEIVED_AT = 128
_BYTES_SENT_AT = 200
_BYTES_RETRANS_AT = 208
_TCP_INFO_LEN = 216

Address = tuple[str, int]


def _address(name: tuple) -> Address:
    """(host, port), with an IPv4-mapped IPv6 host ('::ffff:127.0.0.1') written as IPv4."""
    host = name[0][7:] if name[0].startswith("::ffff:") else name[0]
    return host, name[1]


@dataclass(frozen=True)
class Connection:
    """One TCP socket: its two ends and its payload counters (``sent`` without retransmissions)."""
    local: Address
    peer: Address | None
    sent: int
    received: int


def tcp_connections(exclude: Iterable[Address] = ()) -> dict[int, Connection]:
    """``{socket inode: Connection}`` for every TCP socket (IPv4 or IPv6) this
    process has open now, except those with one end at an address in ``exclude``."""
    excluded = set(exclude)
    found = {}
    fd_dir = "/proc/self/fd"
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:  # closed meanwhile, or the listing's own fd
            continue
        if not target.startswith("socket:["):
            continue
        inode = int(target[8:-1])
        try:
            dup = os.dup(int(name))
        except OSError:
            continue
        sock = socket.socket(fileno=dup)  # owns the duplicate only
        try:
            if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
                continue
            local = _address(sock.getsockname())
            try:
                peer = _address(sock.getpeername())
            except OSError:  # listening or not connected
                peer = None
            if local in excluded or peer in excluded:
                continue
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
            if len(info) < _TCP_INFO_LEN:
                raise OSError("kernel older than 4.19: tcp_info has no tcpi_bytes_sent")
            (received,) = struct.unpack_from("=Q", info, _BYTES_RECEIVED_AT)
            (sent,) = struct.unpack_from("=Q", info, _BYTES_SENT_AT)
            (retrans,) = struct.unpack_from("=Q", info, _BYTES_RETRANS_AT)
            found[inode] = Connection(local, peer, sent - retrans, received)
        except OSError as err:
            if "4.19" in str(err):
                raise
        finally:
            sock.close()
    return found


def difference(now: dict[int, Connection], start: dict[int, Connection]) -> tuple[int, int]:
    """(sent, received) between two snapshots; sockets opened in between count from zero."""
    sent = sum(c.sent - (start[i].sent if i in start else 0) for i, c in now.items())
    received = sum(c.received - (start[i].received if i in start else 0) for i, c in now.items())
    return sent, received


@dataclass
class WireCounter:
    """Payload bytes this process sent and received over TCP between
    :meth:`start` (or entering the ``with`` block) and :meth:`read`, on every
    TCP socket except those with an end in ``exclude``.

    Sockets opened during the interval count from zero; sockets closed during
    it are lost (read before closing a connection)."""

    exclude: tuple[Address, ...] = ()
    _start: dict[int, Connection] = field(default_factory=dict)
    sent: int = 0
    received: int = 0

    def start(self) -> "WireCounter":
        self._start = tcp_connections(self.exclude)
        self.sent = self.received = 0
        return self

    def read(self) -> tuple[int, int]:
        """(sent, received) since :meth:`start`; also stored on the counter."""
        self.sent, self.received = difference(tcp_connections(self.exclude), self._start)
        return self.sent, self.received

    def __enter__(self) -> "WireCounter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.read()
