"""The job's torch.distributed rendezvous store, listening on loopback only.

Book: 8.3 distributed training (the rendezvous store).

Used in: no notebook directly.

``torch.distributed.init_process_group`` with ``env://`` normally makes rank 0
host a ``TCPStore`` that listens on every interface of the host (IPv4 and
IPv6), so any machine that can reach the port can talk to the job.  In local
mode the launcher runs this process instead (as ``torchrun``'s agent hosts the
store): it binds ``--host`` (127.0.0.1) itself, hands the listening socket to
``TCPStore``, and every trainer connects as a client because the launcher sets
``TORCHELASTIC_USE_AGENT_STORE=True`` -- an unmodified DistDGL script too.

The process exits 0 once every client that connected has gone (the trainers
hold their connection until they exit, unless they destroy their process
group) and none of the job's graph servers (``--servers``) listens any more
(they stop when the last trainer exits), or on SIGTERM.  A port that is taken
exits with :data:`PORT_TAKEN_EXIT` and a line naming the port, which the
launcher recognises to retry the job with fresh ports.

Example:
    python -m gnnbook.distributed.store --host 127.0.0.1 --port 29811 --world-size 4 --servers 20100,20101
"""
from __future__ import annotations

import argparse
import datetime
import errno
import signal
import socket
import sys
import time

PORT_TAKEN_EXIT = 98  # errno EADDRINUSE
PORT_TAKEN_MESSAGE = "gnnbook store: port {port} on {host} is already taken"


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (SO_REUSEADDR, as TCPStore sets it)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


def _clients(port: int) -> int:
    """Connections to our listening port, not counting the store's own client."""
    import psutil

    conns = [c for c in psutil.Process().net_connections(kind="tcp") if c.status == psutil.CONN_ESTABLISHED]
    own = {c.laddr.port for c in conns if c.raddr and c.raddr.port == port and c.laddr.port != port}
    return sum(1 for c in conns if c.laddr.port == port and c.raddr and c.raddr.port not in own)


def listening_ports() -> set[int] | None:
    """Ports with a listening TCP socket in this network namespace (None: no /proc here)."""
    ports, found = set(), False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        found = True
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":  # TCP_LISTEN
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports if found else None


def serve(host: str, port: int, world_size: int, servers: tuple[int, ...] = (), poll_s: float = 0.2) -> int:
    """Host the store until every client has connected and gone and no port of
    ``servers`` listens; return the exit code."""
    try:
        sock = listen(host, port)
    except OSError as err:
        if err.errno != errno.EADDRINUSE:
            raise
        print(PORT_TAKEN_MESSAGE.format(port=port, host=host), file=sys.stderr, flush=True)
        return PORT_TAKEN_EXIT
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    import torch.distributed as dist

    # TCPStore owns the descriptor from here on (it closes it), hence detach().
    store = dist.TCPStore(host, port, world_size, True, datetime.timedelta(hours=24), wait_for_workers=False,
                          master_listen_fd=sock.detach())
    print(f"gnnbook store: listening on {host}:{port} for {world_size} ranks", flush=True)
    seen = 0
    while True:
        now = _clients(port)
        seen = max(seen, now)
        if seen and not now:
            still = listening_ports()
            if still is None or not still.intersection(servers):
                print(f"gnnbook store: {seen} clients came and went, no server listens; done", flush=True)
                del store
                return 0
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="torch.distributed rendezvous store on one address")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--servers", default="", help="the graph servers' ports, comma-separated")
    args = parser.parse_args(argv)
    return serve(args.host, args.port, args.world_size, tuple(int(p) for p in args.servers.split(",") if p))


if __name__ == "__main__":
    sys.exit(main())
