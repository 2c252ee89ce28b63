"""The emulated link (a model of a link): an exchange of N bytes takes at least latency + N / bandwidth of
wall time, asleep; exchanges queue; both arms of PipeGCN's timing runs go through it and it changes no
number, only time."""
import time

import pytest

from gnnbook.comm.emulated_link import EmulatedLink
from gnnbook.comm.gloo_bytes import PREAMBLE_BYTES
from gnnbook.base.launch import run_sequence


def test_an_exchange_of_n_bytes_takes_at_least_the_modelled_time_asleep():
    link = EmulatedLink(bandwidth=1e6, latency=0.02)             # 1 MB/s, 20 ms
    n = 30_000                                                  # 30 ms of bytes
    wall, cpu = time.perf_counter(), time.process_time()
    arrival = link.post(n)
    slept = link.wait_until(arrival)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert wall >= 0.05 and slept >= 0.049 and link.slept_s == slept
    assert cpu < 0.5 * wall                                     # it slept, it did not spin
    assert link.bytes == n and link.exchanges == 1 and link.modeled_s == pytest.approx(0.05)
    # an exchange already delivered by the model costs nothing more
    assert link.wait_until(arrival) == 0.0


def test_exchanges_queue_on_the_link_and_latencies_overlap():
    link = EmulatedLink(bandwidth=1e6, latency=0.01)
    t = time.perf_counter()
    first, second = link.post(20_000, t), link.post(10_000, t)
    assert first == pytest.approx(t + 0.02 + 0.01)
    assert second == pytest.approx(t + 0.03 + 0.01)             # behind the first's bytes, not its latency
    later = link.post(10_000, t + 1.0)                            # the link is idle again by then
    assert later == pytest.approx(t + 1.0 + 0.01 + 0.01)
    link.reset()
    assert (link.bytes, link.exchanges, link.modeled_s, link.slept_s) == (0, 0, 0.0, 0.0)


def test_stated_links_and_bad_input_are_named():
    ten = EmulatedLink.stated("10 GbE (TCP)")
    slow = EmulatedLink.stated("10 GbE (TCP)", slowdown=200)
    assert slow.wire_s(12_345) == pytest.approx(200 * ten.wire_s(12_345))
    assert EmulatedLink.from_spec(slow.spec()) == slow and EmulatedLink.from_spec(None) is None
    with pytest.raises(ValueError, match="unknown link 'carrier pigeon'"):
        EmulatedLink.stated("carrier pigeon")
    with pytest.raises(ValueError, match="slowdown must be >= 1"):
        EmulatedLink.stated("10 GbE (TCP)", slowdown=0.5)
    with pytest.raises(ValueError, match="bandwidth > 0"):
        EmulatedLink(0, 1e-3)
    with pytest.raises(ValueError, match="exactly the keys 'bandwidth' and 'latency'"):
        EmulatedLink.from_spec({"bandwidth": 1e9})


@pytest.mark.timeout(300)
def test_both_arms_wait_for_the_link_and_it_changes_only_time():
    hidden, epochs, latency = 16, 4, 0.02
    spec = {"bandwidth": 5e6, "latency": latency}
    out = run_sequence([("gnnbook.ch6_fullgraph.stale:time_modes", dict(dataset="cora", pairs=1, epochs=epochs,
                                                                     hidden=hidden, link=spec))], 2, deadline_s=240)[0]
    link = EmulatedLink.from_spec(spec)
    for o in out:
        assert o.modes == ["sync", "pipe", "sync"] * 2 and o.linked == [False] * 3 + [True] * 3
        # same processes, same partition: every number but time is the loopback run's, bit for bit
        assert o.losses[:3] == o.losses[3:] and o.test_acc[:3] == o.test_acc[3:]
        # both arms: per epoch 2 layers x (rows forward, gradients back), one message each from the one peer,
        # H floats a row plus gloo's two 48-byte headers
        exchanges = epochs * 4
        assert all(b == 0 for b in o.link_bytes[:3])
        assert o.link_bytes[3] == o.link_bytes[4] == o.link_bytes[5] > 0
        assert (o.link_bytes[3] - exchanges * 2 * PREAMBLE_BYTES) % (hidden * 4) == 0
        mean_bytes = o.link_bytes[3] / exchanges
        # wire time is affine in bytes: the exchanges' modelled times add up to this
        assert all(m == pytest.approx(exchanges * link.wire_s(mean_bytes)) for m in o.link_modeled_s[3:])
        # synchronous: every epoch's 4 blocking exchanges take at least their modelled time
        for run in (3, 5):
            assert all(e >= 4 * link.wire_s(mean_bytes) for e in o.epoch_s[run])
        # PipeGCN waited for less of the modelled time than the synchronous runs did: it hid some
        assert o.link_slept_s[4] < min(o.link_slept_s[3], o.link_slept_s[5])
