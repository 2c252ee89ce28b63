"""gnnbook.data: real datasets offline, checksums, allow-list unpickling, synthetic graphs."""
import http.server
import pickle
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gnnbook.data import DATASETS, DatasetError, load_arrays, load_dataset, synthetic_arrays
import gnnbook.data as data_module
from gnnbook.data import files as data_files
from gnnbook.data.safe_pickle import UnsafePickleError, restricted_loads

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"


@pytest.mark.parametrize(
    "name, nodes, undirected_edges, features, classes, split",
    [
        ("cora", 2708, 5278, 1433, 7, (140, 500, 1000)),
        ("citeseer", 3327, 4552, 3703, 6, (120, 500, 1000)),
        ("amazon-photo", 7650, 119081, 745, 8, (160, 240, 7250)),
    ],
)
def test_shipped_dataset_shapes(name, nodes, undirected_edges, features, classes, split):
    g = load_dataset(name)
    assert g.num_nodes() == nodes
    assert g.num_edges() == 2 * undirected_edges
    assert tuple(g.ndata["feat"].shape) == (nodes, features)
    assert int(g.ndata["label"].max()) + 1 == classes
    assert tuple(int(g.ndata[f"{s}_mask"].sum()) for s in ("train", "val", "test")) == split
    src, dst = g.edges()
    assert not bool((src == dst).any()), "self-loops are removed"
    assert g.has_edges_between(dst, src).all(), "every edge is stored in both directions"
    masks = sum(g.ndata[f"{s}_mask"].int() for s in ("train", "val", "test"))
    assert int(masks.max()) == 1, "train/val/test are disjoint"


def test_planetoid_features_are_row_normalised():
    feat = load_dataset("cora").ndata["feat"]
    assert np.allclose(feat.sum(1).numpy(), 1.0, atol=1e-5)


def test_conversion_cache_is_reused_and_equal(tmp_path, monkeypatch):
    spec = DATASETS["cora"]
    (tmp_path / spec.folder).mkdir()
    for name, path in data_files.raw_files(spec, download=False).items():   # wherever they are found
        shutil.copyfile(path, tmp_path / spec.folder / name)
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    parser, parses = data_module._PARSERS[spec.format], []
    monkeypatch.setitem(data_module._PARSERS, spec.format,
                        lambda *args: parses.append(args[0]) or parser(*args))
    first = load_arrays("cora")
    cached = list((tmp_path / "processed").glob("cora-*.npz"))
    assert len(cached) == 1 and parses == ["cora"]
    second = load_arrays("cora")
    assert parses == ["cora"], "the second load reads the cache, it does not parse the raw files again"
    assert np.array_equal(first.src, second.src) and np.array_equal(first.feat, second.feat)
    cached[0].write_bytes(b"damaged")
    third = load_arrays("cora")
    assert parses == ["cora", "cora"], "a damaged cache is rebuilt from the raw files"
    assert np.array_equal(first.dst, third.dst) and np.array_equal(load_arrays("cora").label, first.label)
    assert len(parses) == 2


def test_unknown_dataset_lists_known_names():
    with pytest.raises(DatasetError) as info:
        load_dataset("corra")
    message = str(info.value)
    assert "Did you mean 'cora'" in message
    for name in DATASETS:
        assert name in message


def _copy_cora(dest: Path) -> Path:
    shutil.copytree(SHARED / "cora", dest / "cora")
    for f in (dest / "cora").iterdir():
        f.chmod(0o644)
    return dest / "cora"


def test_corrupt_file_is_named(tmp_path, monkeypatch):
    folder = _copy_cora(tmp_path)
    (folder / "ind.cora.tx").write_bytes(b"garbage")
    monkeypatch.setattr(data_files, "search_dirs", lambda: [tmp_path])
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    with pytest.raises(DatasetError, match=r"checksum mismatch for .*ind\.cora\.tx"):
        load_arrays("cora", download=False)
    assert not (tmp_path / "processed").exists() or not list((tmp_path / "processed").iterdir())


def test_missing_files_offline_say_where_to_put_them(tmp_path, monkeypatch):
    monkeypatch.setattr(data_files, "search_dirs", lambda: [tmp_path / "nowhere"])
    with pytest.raises(DatasetError) as info:
        load_arrays("citeseer", download=False)
    assert "not found" in str(info.value) and str(tmp_path / "nowhere" / "citeseer") in str(info.value)
    assert "GNNBOOK_DATA_DIR" in str(info.value)


def test_download_from_pinned_url_checks_sha_and_lands_in_cache(tmp_path, monkeypatch):
    """A real HTTP download over loopback, standing in for the pinned URL."""
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(SHARED / "graphdata" / "amazon_photo.npz", served / "amazon_photo.npz")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(served))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = replace(DATASETS["amazon-photo"], url_template=f"http://127.0.0.1:{server.server_port}/{{file}}")
        cache = tmp_path / "cache"
        monkeypatch.setenv("GNNBOOK_DATA_DIR", str(cache))
        monkeypatch.setattr(data_files, "search_dirs", lambda: [cache])
        paths = data_files.raw_files(spec)
        assert paths["amazon_photo.npz"] == cache / "graphdata" / "amazon_photo.npz"
        assert data_files.sha256_of(paths["amazon_photo.npz"]) == spec.files["amazon_photo.npz"]
        # A file served with other bytes is refused and nothing is left behind.
        (served / "amazon_photo.npz").write_bytes(b"not the pinned bytes")
        paths["amazon_photo.npz"].unlink()
        with pytest.raises(DatasetError, match="does not match"):
            data_files.raw_files(spec)
        assert not list((cache / "graphdata").iterdir())
    finally:
        server.shutdown()


def test_unreachable_url_gives_clear_error(tmp_path, monkeypatch):
    spec = replace(DATASETS["cora"], url_template="http://127.0.0.1:9/{file}")  # port 9: discard, closed
    monkeypatch.setattr(data_files, "search_dirs", lambda: [tmp_path])
    monkeypatch.setenv("GNNBOOK_DATA_DIR", str(tmp_path))
    with pytest.raises(DatasetError, match="the download failed"):
        data_files.raw_files(spec)


def test_allow_list_unpickler_refuses_other_callables():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with pytest.raises(UnsafePickleError, match="builtins.print"):
        restricted_loads(pickle.dumps(Evil()))
    assert restricted_loads(pickle.dumps({"a": [1, 2]})) == {"a": [1, 2]}


def test_synthetic_graphs_are_seeded_and_shaped():
    a = synthetic_arrays("powerlaw", num_nodes=5000, avg_degree=12, seed=3)
    b = synthetic_arrays("powerlaw", num_nodes=5000, avg_degree=12, seed=3)
    c = synthetic_arrays("powerlaw", num_nodes=5000, avg_degree=12, seed=4)
    assert np.array_equal(a.src, b.src) and np.array_equal(a.feat, b.feat)
    assert not np.array_equal(a.src, c.src)
    degree = np.bincount(a.src, minlength=a.num_nodes)
    assert 8 <= degree.mean() <= 12.5
    assert degree.max() > 10 * degree.mean(), "power-law weights make hubs"
    sbm = synthetic_arrays("sbm", num_nodes=5000, avg_degree=12, homophily=0.8, seed=0)
    same = (sbm.label[sbm.src] == sbm.label[sbm.dst]).mean()
    assert 0.75 < same < 0.9, f"edge homophily {same:.2f} should be near 0.8 + 0.2/8"
    assert np.bincount(sbm.src).max() < 5 * 12, "an SBM has no hubs"


def test_synthetic_options_and_errors():
    g = load_dataset("sbm", num_nodes=300, avg_degree=4, num_features=7)
    assert g.ndata["feat"].shape == (300, 7)
    with pytest.raises(ValueError, match="num_nodes"):
        synthetic_arrays("sbm", num_nodes=1)
    with pytest.raises(TypeError, match="only apply to synthetic"):
        load_arrays("cora", num_nodes=10)


def test_scale_graph_is_seeded_simple_and_symmetric():
    a = load_arrays("scale", num_nodes=30_000, avg_degree=10, seed=1)
    b = load_arrays("scale", num_nodes=30_000, avg_degree=10, seed=1)
    c = load_arrays("scale", num_nodes=30_000, avg_degree=10, seed=2)
    assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("src", "dst", "feat", "label", "train_mask"))
    assert not np.array_equal(a.src, c.src)
    n = a.num_nodes
    forward, backward = np.sort(a.src * n + a.dst), np.sort(a.dst * n + a.src)
    assert np.array_equal(forward, backward), "every edge is stored in both directions"
    assert len(np.unique(forward)) == len(forward) and not (a.src == a.dst).any(), "no duplicates, no self-loops"
    degree = np.bincount(a.src, minlength=n)
    assert degree.max() > 20 * degree.mean(), "power-law weights make hubs"
    assert 0.7 < (a.label[a.src] == a.label[a.dst]).mean() < 0.95, "homophily 0.8 (plus chance)"
    assert 0.09 < a.train_mask.mean() < 0.11 and 0.04 < a.test_mask.mean() < 0.06
    assert not (a.train_mask & a.test_mask).any() and not (a.val_mask & a.test_mask).any()
    # A node's own features carry its label (well above chance), and one round of mean aggregation
    # over the node and its neighbours much more: what a GNN adds is measurable on this graph.
    means = np.stack([a.feat[a.train_mask & (a.label == k)].mean(0) for k in range(16)])
    aggregated = a.feat.copy()
    np.add.at(aggregated, a.dst, a.feat[a.src])
    aggregated /= (degree + 1)[:, None]

    def nearest_mean_accuracy(x):
        guess = ((x[a.test_mask, None, :] - means) ** 2).sum(-1).argmin(1)
        return (guess == a.label[a.test_mask]).mean()

    own, mean_aggregated = nearest_mean_accuracy(a.feat), nearest_mean_accuracy(aggregated)
    print(f"nearest class mean: own features {own:.2f}, mean over node and neighbours {mean_aggregated:.2f}")
    assert 2 / 16 < own < 0.6 and mean_aggregated > own + 0.15, (own, mean_aggregated)


def test_scale_graph_size_is_printed_first_and_bounds_the_graph(capsys):
    from gnnbook.data import scale_graph_bytes

    g = load_arrays("scale", num_nodes=20_000, avg_degree=16, num_features=12)
    printed = capsys.readouterr().err
    size = scale_graph_bytes(20_000, avg_degree=16, num_features=12)
    assert printed.startswith("scale graph: 20,000 nodes, at most 320,000 directed edges") and str(size) in printed
    real = g.src.nbytes + g.dst.nbytes + g.feat.nbytes
    assert 0.7 * (size.structure + size.features) < real <= size.structure + size.features
    with pytest.raises(ValueError, match="train_fraction"):
        load_arrays("scale", num_nodes=100, train_fraction=0.9, val_fraction=0.1)
    with pytest.raises(ValueError, match="scale_arrays"):
        synthetic_arrays("scale")


SCALE_PEAK = """
import resource, sys
import numpy as np
from gnnbook.data import scale_arrays
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
g = scale_arrays(600_000, avg_degree=20, num_features=32)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(peak - before, sum(getattr(g, f).nbytes for f in ("src", "dst", "feat", "label", "train_mask", "val_mask",
                                                         "test_mask")))
"""


def test_scale_graph_is_built_without_a_second_copy():
    """Peak memory of the generation, above the interpreter's, is the graph plus a quarter of its
    edge arrays (the pair keys) and chunk buffers (1.33 measured), well under two graphs."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", SCALE_PEAK], capture_output=True, text=True, check=True, timeout=300)
    grown, graph = map(int, out.stdout.split()[-2:])
    assert graph > 200 << 20
    assert grown < 1.6 * graph, f"generation grew the process by {grown / graph:.2f} x the graph"


def test_synthetic_docstring_examples_hold():
    import doctest

    from gnnbook.data import synthetic

    assert doctest.testmod(synthetic, optionflags=doctest.ELLIPSIS).failed == 0
