"""Bytes on the wire, measured from this process's own TCP sockets.

gloo (torch.distributed on CPU) and DistDGL's RPC move tensors over TCP.  The
kernel keeps, for every TCP socket, the payload bytes it sent and received
(``tcpi_bytes_sent`` and ``tcpi_bytes_received`` in ``struct tcp_info``,
Linux >= 4.19), whatever system call wrote them.  A process finds its sockets
in ``/proc/self/fd`` and asks each with ``getsockopt(TCP_INFO)``.  Two things
this does not see, so a measurement stands beside a formula with a stated
overhead: TCP/IP headers (payload only), and sockets closed during the
measured interval (gloo keeps its connections open for the life of the
process group, so collectives are fully counted).

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

# Offsets in struct tcp_info (include/uapi/linux/tcp.h); both fields are u64.
_BYTES_RECEIVED_AT = 128
_BYTES_SENT_AT = 200
_TCP_INFO_LEN = 208


def tcp_socket_counters() -> dict[int, tuple[int, int]]:
    """``{socket inode: (bytes_sent, bytes_received)}`` for every TCP socket
    (IPv4 or IPv6) this process has open now."""
    counters = {}
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
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
            if len(info) < _TCP_INFO_LEN:
                raise OSError("kernel older than 4.19: tcp_info has no tcpi_bytes_sent")
            (received,) = struct.unpack_from("=Q", info, _BYTES_RECEIVED_AT)
            (sent,) = struct.unpack_from("=Q", info, _BYTES_SENT_AT)
            counters[inode] = (sent, received)
        except OSError as err:
            if "4.19" in str(err):
                raise
        finally:
            sock.close()
    return counters


@dataclass
class WireCounter:
    """Payload bytes this process sent and received over TCP between
    :meth:`start` (or entering the ``with`` block) and :meth:`read`.

    Sockets opened during the interval count from zero; sockets closed during
    it are lost (read before closing a connection)."""

    _start: dict[int, tuple[int, int]] = field(default_factory=dict)
    sent: int = 0
    received: int = 0

    def start(self) -> "WireCounter":
        self._start = tcp_socket_counters()
        self.sent = self.received = 0
        return self

    def read(self) -> tuple[int, int]:
        """(sent, received) since :meth:`start`; also stored on the counter."""
        now = tcp_socket_counters()
        self.sent = sum(s - self._start.get(inode, (0, 0))[0] for inode, (s, _) in now.items())
        self.received = sum(r - self._start.get(inode, (0, 0))[1] for inode, (_, r) in now.items())
        return self.sent, self.received

    def __enter__(self) -> "WireCounter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.read()
