"""The wire counter reads what the kernel says a TCP socket carried."""
import socket

from gnnbook.base.wire import WireCounter


def test_counts_payload_of_a_loopback_tcp_connection():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    payload = b"x" * 123_457
    with WireCounter() as wire:
        client.sendall(payload)
        got = 0
        while got < len(payload):
            got += len(peer.recv(1 << 20))
    # Both ends live in this process: it sent and received the payload once each.
    assert wire.sent == len(payload) and wire.received == len(payload)
    for s in (client, peer, server):
        s.close()
