"""The link cost model and route planner of 5.5.3 (a model: nominal bandwidths, no measurement)."""
import itertools

import pytest

from gnnbook.comm.topology import (DGX1_NVLINK, LINK_SPECS, Topology, candidate_routes, default_route, dgx1_cluster,
                                   plan_time, route_plan)


def test_dgx1_has_the_hybrid_cube_mesh():
    topo = dgx1_cluster(machines=1)
    nvlink = {(a, b) for (a, b), spec in topo.links.items() if spec == LINK_SPECS["nvlink"]}
    assert len(nvlink) == 2 * len(DGX1_NVLINK) == 32                       # 16 links, both directions
    assert all(sum(1 for a, _ in nvlink if a == f"gpu{g}") == 4 for g in range(8))   # 4 NVLinks per GPU
    assert default_route(topo, 0, 5) == ["gpu0", "host0", "gpu5"]           # no NVLink between 0 and 5


def test_a_transfer_without_nvlink_is_relayed_over_nvlink_and_takes_the_faster_link_time():
    topo = dgx1_cluster(machines=1)
    plan = route_plan(topo, {(0, 5): 1e9})
    route = plan[(0, 5)]
    assert route[0] == "gpu0" and route[-1] == "gpu5" and "host0" not in route
    nv_bw, nv_lat = LINK_SPECS["nvlink"]
    assert plan_time(topo, {(0, 5): 1e9}) == pytest.approx(1e9 / nv_bw + 2 * nv_lat)
    assert plan_time(topo, {(0, 5): 1e9}, "naive") == pytest.approx(1e9 / LINK_SPECS["pcie"][0]
                                                                    + 2 * LINK_SPECS["pcie"][1])


def test_the_planner_is_never_worse_than_the_naive_plan_and_brute_force_agrees_on_a_small_case():
    topo = dgx1_cluster(machines=1)
    transfers = {(0, 5): 3e8, (1, 4): 2e8, (2, 7): 1e8}
    planned = plan_time(topo, transfers)
    assert planned <= plan_time(topo, transfers, "naive")
    options = [candidate_routes(topo, s, d) for s, d in transfers]
    best = float("inf")
    for choice in itertools.product(*options):   # every combination of candidate routes
        load = {}
        for (pair, size), route in zip(transfers.items(), choice):
            for hop in zip(route, route[1:]):
                load[hop] = load.get(hop, 0) + size
        busiest = max(size / topo.link(*hop)[0] for hop, size in load.items())
        latency = max(sum(topo.link(*hop)[1] for hop in zip(r, r[1:])) for r in choice)
        best = min(best, busiest + latency)
    assert planned <= best * 1.05


def test_bad_input_is_named():
    topo = Topology(gpus_per_machine=2, machines=1)
    with pytest.raises(ValueError, match="unknown link kind 'infiniband'; choose one of nvlink, pcie, network"):
        topo.add("gpu0", "gpu1", "infiniband")
    with pytest.raises(ValueError, match="no link gpu0 -> host0"):
        plan_time(topo, {(0, 1): 1e6})
    with pytest.raises(ValueError, match="unknown plan 'smart'"):
        route_plan(dgx1_cluster(1), {(0, 1): 1.0}, "smart")
