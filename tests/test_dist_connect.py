"""A trainer connects the moment its servers listen (gnnbook.distributed.trainer.wait_for_local_servers),
instead of waiting out DGL's 3-second retry; other hosts are left to DGL."""
import os
import socket
import time

os.environ.setdefault("DGLBACKEND", "pytorch")

from gnnbook.distributed.trainer import wait_for_local_servers  # noqa: E402


def test_returns_when_the_local_servers_listen_and_not_before(tmp_path):
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: a server still loading its partition
        config = tmp_path / "ip_config.txt"
        config.write_text(f"127.0.0.1 {listening.getsockname()[1]}\n")
        start = time.monotonic()
        assert wait_for_local_servers(str(config), 1, timeout_s=5) is True
        assert time.monotonic() - start < 1
        config.write_text(f"127.0.0.1 {listening.getsockname()[1]}\n127.0.0.1 {closed.getsockname()[1]}\n")
        start = time.monotonic()
        assert wait_for_local_servers(str(config), 1, timeout_s=0.5) is False
        assert time.monotonic() - start >= 0.5


def test_a_remote_host_is_left_to_dgl(tmp_path):
    config = tmp_path / "ip_config.txt"
    config.write_text("127.0.0.1 30050\n10.0.0.2 30050\n")
    start = time.monotonic()
    assert wait_for_local_servers(str(config), 1, timeout_s=5) is False
    assert time.monotonic() - start < 1
