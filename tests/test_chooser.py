"""The training-method chooser on cases whose answer is clear (gnnbook.ch7_systems.chooser, chapter 7.7)."""
import pytest

from gnnbook.ch7_systems.chooser import METHODS, Hardware, Workload, choose, memory_needs
from gnnbook.graph.sizing import embedding_table_bytes

CORA = Workload(num_nodes=2708, num_edges=10556, feat_dim=1433, num_classes=7, hidden=16)
LAPTOP = Hardware(machines=1, devices_per_machine=0, device_memory=8e9, host_memory=8e9)
# a graph with 1e9 edges (papers100M-like: 1e8 nodes, 128 features), 3 layers
BIG = Workload(num_nodes=10**8, num_edges=10**9, feat_dim=128, num_classes=172, num_layers=3, fanouts=(15, 10, 5))
CLUSTER = Hardware(machines=8, devices_per_machine=1, device_memory=16e9, host_memory=64e9, link_gbps=10)


def test_cora_on_a_laptop_is_single_device_full_graph():
    rec = choose(CORA, LAPTOP)
    assert rec.method == "single-device full-graph"
    assert rec.needs["full_graph_total"] < 1e8  # tens of MB
    assert rec.options[0]["method"] == rec.method and rec.options[0]["fits"]


def test_a_billion_edges_on_eight_machines_is_distributed():
    rec = choose(BIG, CLUSTER)
    assert rec.method in ("distributed minibatch", "distributed full-graph")
    assert rec.method == "distributed minibatch"  # the full graph's activations (~1 TB) exceed 8 x 16 GB
    assert rec.needs["full_graph_total"] > 8 * 16e9
    assert rec.needs["structure"] + rec.needs["features"] > 0.8 * 64e9  # one host cannot hold it


def test_small_hosts_with_roomy_devices_use_distributed_full_graph():
    # Cora's graph and features (15.6 MB) exceed one host's usable 8 MB, so neither one-machine method
    # fits; on four machines both distributed methods fit, and exchanging 16-wide hidden rows of the
    # halo moves far fewer bytes than fetching 1433-wide remote feature rows for every minibatch.
    rec = choose(CORA, Hardware(machines=4, devices_per_machine=1, device_memory=8e9, host_memory=10e6))
    by_method = {o["method"]: o for o in rec.options}
    assert [m for m in METHODS if by_method[m]["fits"]] == ["distributed full-graph", "distributed minibatch"]
    halo_rows = 0.5 * 2708 * 2 * 2                                   # halo_factor 1.5; 2 layers, forward + backward
    assert by_method["distributed full-graph"]["link_bytes"] == halo_rows * 16 * 4
    assert by_method["distributed full-graph"]["link_bytes"] < by_method["distributed minibatch"]["link_bytes"]
    assert rec.method == "distributed full-graph" and "halo exchange" in rec.reason
    assert rec.options[0]["method"] == rec.method


def test_one_big_host_with_big_devices_uses_minibatch_with_caching():
    rec = choose(BIG, Hardware(machines=1, devices_per_machine=8, device_memory=80e9, host_memory=1e12))
    assert rec.method == "minibatch with caching"
    assert "caches" in rec.reason


def test_nothing_fits_says_so():
    rec = choose(BIG, Hardware(machines=1, devices_per_machine=1, device_memory=4e9, host_memory=16e9))
    assert rec.method == "does not fit"
    assert not any(o["fits"] for o in rec.options)


def test_memory_needs_use_sizing():
    needs = memory_needs(CORA)
    assert needs["features"] == embedding_table_bytes(2708, 1433)
    assert needs["structure"] == 8 * (2708 + 1 + 10556)
    assert needs["full_graph_total"] == sum(needs[k] for k in ("structure", "features", "params_and_optimizer",
                                                               "full_graph_activations"))


def test_table_lists_every_method_chosen_first():
    rec = choose(BIG, CLUSTER)
    table = rec.table()
    assert set(table.index) == set(METHODS) and table.index[0] == rec.method


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="transformer"), "unknown model 'transformer'"),
    (dict(fanouts=(10,)), "one entry per layer"),
    (dict(num_nodes=0), "num_nodes must be positive"),
    (dict(train_fraction=0.0), "train_fraction"),
    (dict(halo_factor=0.5), "halo_factor"),
])
def test_bad_workload_is_named(kwargs, match):
    base = dict(num_nodes=100, num_edges=1000, feat_dim=8)
    with pytest.raises(ValueError, match=match):
        Workload(**{**base, **kwargs})


def test_bad_hardware_is_named():
    with pytest.raises(ValueError, match="machines"):
        Hardware(machines=0)
    with pytest.raises(ValueError, match="positive"):
        Hardware(link_gbps=0)
