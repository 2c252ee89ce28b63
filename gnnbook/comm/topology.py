"""A cost model of a GPU cluster's links, and a route planner for its transfers (book 5.5.3, DGCL).

Book: 5.5.3 communication-link optimisation (DGCL).

Used in: chapters/05d_communication.ipynb.

**This is a model, not a measurement**: the bandwidths and latencies are the
vendors' nominal figures (stated in :data:`LINK_SPECS`), not anything measured
on this machine, which has no GPU and no network.

A topology is a set of devices and directed links between them, each with a
bandwidth (bytes/s) and a latency (s).  A *transfer* moves some bytes from one
GPU to another along a *route* (a list of links).  The time of a plan is that
of its busiest link (bytes over it / bandwidth) plus the largest latency of a
route: links carry their transfers at the same time, so the slowest link
decides.  The naive plan sends every transfer along the default route (NVLink
when the two GPUs have one, otherwise through PCIe and the host; across
machines through PCIe, the network card and the network).  DGCL (Cai et al.,
EuroSys 2021) instead chooses each transfer's route so that the load spreads
over fast links, for example through a GPU that has NVLink to both ends.
:func:`plan_routes` does that greedily, largest transfer first.

Example:
    >>> topo = dgx1_cluster(machines=1)
    >>> naive, planned = plan_time(topo, {(0, 5): 1e9}, "naive"), plan_time(topo, {(0, 5): 1e9}, "planned")
    >>> naive > planned
    True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

# Nominal one-direction figures (bytes/s, seconds) of the links in a V100 DGX-1 cluster.
LINK_SPECS: dict[str, tuple[float, float]] = {
    "nvlink": (25e9, 2e-6),      # one NVLink 2.0 brick, per direction
    "pcie": (12e9, 5e-6),        # PCIe 3.0 x16, effective, per direction
    "network": (12.5e9, 10e-6),  # 100 Gb/s Ethernet / InfiniBand EDR, per direction
}

# The DGX-1's hybrid cube-mesh: 8 GPUs, each with NVLink to 4 others (two quads plus cross links).
DGX1_NVLINK = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7),
               (0, 4), (1, 5), (2, 6), (3, 7)]


@dataclass
class Topology:
    """Devices ``'gpuN'``, ``'hostM'`` and ``'nicM'``, and directed links ``(a, b) -> (bandwidth, latency)``."""

    gpus_per_machine: int
    machines: int
    links: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)

    def add(self, a: str, b: str, kind: str) -> None:
        if kind not in LINK_SPECS:
            raise ValueError(f"unknown link kind {kind!r}; choose one of {', '.join(LINK_SPECS)}")
        self.links[(a, b)] = self.links[(b, a)] = LINK_SPECS[kind]

    def machine_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_machine

    def link(self, a: str, b: str) -> tuple[float, float]:
        if (a, b) not in self.links:
            raise ValueError(f"the topology has no link {a} -> {b}: add it (Topology.add) or route around it")
        return self.links[(a, b)]


def dgx1_cluster(machines: int = 2) -> Topology:
    """``machines`` DGX-1 servers (8 V100 each, hybrid cube-mesh NVLink; every GPU on PCIe to its host;
    one network card per host), joined by one network switch."""
    topo = Topology(gpus_per_machine=8, machines=machines)
    for m in range(machines):
        for a, b in DGX1_NVLINK:
            topo.add(f"gpu{8 * m + a}", f"gpu{8 * m + b}", "nvlink")
        for g in range(8):
            topo.add(f"gpu{8 * m + g}", f"host{m}", "pcie")
        topo.add(f"host{m}", f"nic{m}", "pcie")
        topo.add(f"nic{m}", "switch", "network")
    return topo


def default_route(topo: Topology, src: int, dst: int) -> list[str]:
    """The route a transfer takes without planning: NVLink if the two GPUs share one, else via the host(s)."""
    a, b = f"gpu{src}", f"gpu{dst}"
    if (a, b) in topo.links:
        return [a, b]
    ma, mb = topo.machine_of(src), topo.machine_of(dst)
    if ma == mb:
        return [a, f"host{ma}", b]
    return [a, f"host{ma}", f"nic{ma}", "switch", f"nic{mb}", f"host{mb}", b]


def candidate_routes(topo: Topology, src: int, dst: int) -> list[list[str]]:
    """The default route, and the default route relayed through one other GPU (src -> relay over NVLink,
    then relay -> dst by its own default route)."""
    routes = [default_route(topo, src, dst)]
    for relay in range(topo.machines * topo.gpus_per_machine):
        if relay not in (src, dst) and (f"gpu{src}", f"gpu{relay}") in topo.links:
            routes.append([f"gpu{src}"] + default_route(topo, relay, dst))
    return routes


def _hops(route: list[str]) -> Iterable[tuple[str, str]]:
    return zip(route, route[1:])


def route_plan(topo: Topology, transfers: dict[tuple[int, int], float], how: str = "planned"
               ) -> dict[tuple[int, int], list[str]]:
    """A route per transfer: ``"naive"`` (default routes) or ``"planned"`` (greedy, largest first:
    the candidate that keeps the busiest link's time lowest, then the shortest)."""
    if how not in ("naive", "planned"):
        raise ValueError(f"unknown plan {how!r}; choose 'naive' or 'planned'")
    seconds: dict[tuple[str, str], float] = {}
    plan = {}
    for (src, dst), size in sorted(transfers.items(), key=lambda kv: -kv[1]):
        options = [default_route(topo, src, dst)] if how == "naive" else candidate_routes(topo, src, dst)

        def cost(route: list[str], size: float = size) -> tuple[float, int]:
            busiest = max(seconds.get(hop, 0.0) + size / topo.link(*hop)[0] for hop in _hops(route))
            return max(busiest, max(seconds.values(), default=0.0)), len(route)

        best = min(options, key=cost)
        for hop in _hops(best):
            seconds[hop] = seconds.get(hop, 0.0) + size / topo.link(*hop)[0]
        plan[(src, dst)] = best
    return plan


def plan_time(topo: Topology, transfers: dict[tuple[int, int], float], how: str = "planned") -> float:
    """Modelled seconds of all ``transfers`` (bytes per (src GPU, dst GPU)) under the plan ``how``."""
    plan = route_plan(topo, transfers, how)
    load: dict[tuple[str, str], float] = {}
    for (src, dst), route in plan.items():
        for hop in _hops(route):
            load[hop] = load.get(hop, 0.0) + transfers[(src, dst)]
    busiest = max((size / topo.link(*hop)[0] for hop, size in load.items()), default=0.0)
    latency = max((sum(topo.link(*hop)[1] for hop in _hops(route)) for route in plan.values()), default=0.0)
    return busiest + latency
