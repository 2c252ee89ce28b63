"""Feature-loading paths (lab 12): the same rows by every path, the staging buffer reused, the
zero-copy line count, the cost model's inputs checked; the GPU paths where a GPU is present."""
import pytest
import torch

from gnnbook.ch5_minibatch.feature_loading import (LoadingModel, PinnedInPlace, allocated_bytes, fit_host,
                                     gather_into, input_node_batches, measure_device, measure_host_grid,
                                     measure_link, pageable_host, pcie_lines, ranking_disagreements, staging_buffer,
                                     triton_gather, zero_copy_engine)

HOST = {"pageable": (2e-5, 1e-8, 5e-10), "pinned": (1e-5, 3e-9, 1e-10)}


@pytest.fixture
def table():
    return torch.rand(500, 37, generator=torch.Generator().manual_seed(0))


def test_gather_into_writes_the_rows_into_the_reused_buffer_without_allocating(table):
    staging = staging_buffer(300, 37, pin=False)
    ids = torch.randint(0, 500, (300,), generator=torch.Generator().manual_seed(1))
    out = gather_into(table, ids, staging)
    assert torch.equal(out, table[ids]) and out.data_ptr() == staging.data_ptr()
    assert allocated_bytes(lambda: gather_into(table, ids, staging)) < 1000   # the profiler's own few bytes
    short = gather_into(table, ids[:3].to(torch.int32), staging)
    assert torch.equal(short, table[ids[:3]]) and short.data_ptr() == staging.data_ptr()


def test_pageable_host_returns_a_fresh_tensor_and_fills_the_bounce_buffer(table):
    ids = torch.tensor([4, 4, 499, 0])
    bounce = torch.zeros(10, 37)
    rows = pageable_host(table, ids, bounce)
    assert torch.equal(rows, table[ids]) and torch.equal(bounce[:4], rows) and rows.data_ptr() != bounce.data_ptr()
    assert allocated_bytes(lambda: pageable_host(table, ids, bounce)) >= rows.numel() * 4


def test_gather_refuses_bad_input_with_a_clear_message(table):
    staging = staging_buffer(4, 37, pin=False)
    with pytest.raises(ValueError, match="do not fit a staging buffer of 4"):
        gather_into(table, torch.arange(5), staging)
    with pytest.raises(ValueError, match="does not fit rows of width 37"):
        gather_into(table, torch.arange(2), staging_buffer(4, 36, pin=False))
    with pytest.raises(ValueError, match="does not fit rows"):
        gather_into(table, torch.arange(2), staging_buffer(4, 37, dtype=torch.float64, pin=False))
    with pytest.raises(ValueError, match="1-D int64 or int32"):
        gather_into(table, torch.tensor([[0, 1]]), staging)
    with pytest.raises(ValueError, match="2-D table"):
        gather_into(table[0], torch.tensor([0]), staging)
    with pytest.raises(ValueError, match="rows >= 1"):
        staging_buffer(0, 3, pin=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_pinning_without_cuda_says_so():
    with pytest.raises(RuntimeError, match="pass pin=False"):
        staging_buffer(2, 2, pin=True)
    with pytest.raises(RuntimeError, match="CUDA"):
        PinnedInPlace(torch.zeros(3))
    with pytest.raises(RuntimeError, match="CUDA"):
        measure_link()
    assert zero_copy_engine() is None


@pytest.mark.parametrize("width, itemsize", [(16, 4), (32, 4), (24, 4), (40, 4), (745, 4), (3, 2), (1, 8)])
def test_pcie_lines_match_an_enumeration_of_the_bytes(width, itemsize):
    ids = torch.randint(0, 10_000, (64,), generator=torch.Generator().manual_seed(width))
    row = width * itemsize
    expected = sum(len({b // 128 for b in range(r * row, (r + 1) * row)}) for r in ids.tolist())
    assert pcie_lines(ids, width, itemsize) == expected
    with pytest.raises(ValueError, match="must be >= 1"):
        pcie_lines(ids, 0)


def test_fit_host_recovers_known_terms_and_refuses_too_few_samples():
    truth = (3e-5, 4e-9, 2.5e-10)
    samples = [(r, w, truth[0] + truth[1] * r + truth[2] * r * w * 4) for r in (500, 2000, 5000) for w in (16, 256)]
    assert fit_host(samples) == pytest.approx(truth, rel=1e-6)
    # a term the data cannot support is clipped at zero, never negative
    assert min(fit_host([(r, w, 1e-9 * r * w * 4) for r in (10, 100, 1000) for w in (8, 64)])) >= 0
    with pytest.raises(ValueError, match="at least 3"):
        fit_host(samples[:2])


def test_loading_model_refuses_bad_input():
    with pytest.raises(ValueError, match=r"host terms for \['pinned'\]"):
        LoadingModel(host={"pageable": HOST["pageable"]})
    with pytest.raises(ValueError, match="pcie_bytes_per_s must be positive"):
        LoadingModel(host=HOST, pcie_bytes_per_s=0)
    with pytest.raises(ValueError, match="launch_s must be >= 0"):
        LoadingModel(host=HOST, launch_s=-1)
    with pytest.raises(ValueError, match="width >= 1"):
        LoadingModel(host=HOST).predict(10, 0)


def test_loading_model_zero_copy_pays_for_whole_lines():
    model = LoadingModel(host=HOST)
    ids = torch.arange(0, 4000, 2)
    narrow, aligned = model.predict(len(ids), 16, ids), model.predict(len(ids), 32, ids)
    # 64-byte rows each cost a 128-byte line: the same link time as 128-byte rows
    assert narrow["zero-copy"] == pytest.approx(aligned["zero-copy"])
    assert model.with_link(24e9, 5e-6).predict(len(ids), 32, ids)["zero-copy"] < aligned["zero-copy"]


def test_ranking_disagreements_judges_only_pairs_the_model_separates():
    modelled = {"pageable": 3.0, "pinned": 2.0, "zero-copy": 1.0}
    assert ranking_disagreements(modelled, {"pageable": 9.0, "pinned": 5.0, "zero-copy": 4.0}) == []
    assert (ranking_disagreements(modelled, {"pageable": 9.0, "pinned": 3.0, "zero-copy": 4.0})
            == [("zero-copy", "pinned")])
    assert ranking_disagreements({"a": 1.0, "b": 1.1}, {"a": 2.0, "b": 1.0}) == []   # within the margin
    with pytest.raises(ValueError, match="margin"):
        ranking_disagreements(modelled, modelled, margin=0.5)


def test_host_grid_on_sampled_minibatches():
    from gnnbook.data import load_dataset

    graph = load_dataset("cora")
    batches = {b: input_node_batches(graph, [5, 5], b, 2, seed=0) for b in (8, 64)}
    assert all(len(x) > 0 and x.max() < graph.num_nodes() for xs in batches.values() for x in xs)
    assert [len(x) for x in input_node_batches(graph, [5, 5], 8, 2, seed=0)] == [len(x) for x in batches[8]]
    grid = measure_host_grid(batches, [8, 32], graph.num_nodes(), repeats=2, rounds=1)
    assert {(r["batch_size"], r["width"]) for r in grid} == {(8, 8), (8, 32), (64, 8), (64, 32)}
    for r in grid:   # the bytes of a minibatch's gathered rows, measured on a gather of float32 features
        table = torch.zeros(graph.num_nodes(), r["width"])
        gathered = [table[x].nbytes for x in batches[r["batch_size"]]]
        assert r["bytes"] == int(sum(gathered) / len(gathered)) and len(r["timings"]["pinned"]) == 2
        assert r["pinned"] == min(r["timings"]["pinned"]) > 0
    with pytest.raises(ValueError, match="at least one"):
        measure_host_grid({}, [8], 10)


def test_triton_zero_copy_kernel_in_the_cpu_interpreter(monkeypatch, table):
    """The zero-copy kernel's indexing, run by Triton's interpreter (no GPU needed)."""
    pytest.importorskip("triton")
    import triton.runtime.interpreter as interpreter

    import importlib.util

    import gnnbook.ch5_minibatch.uva_gather

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    # Triton 2.2's interpreter lacks the compile target that integer casts consult (later Triton moved its
    # builder elsewhere and has the target: nothing to patch there)
    if hasattr(interpreter, "Builder"):
        monkeypatch.setattr(interpreter.Builder, "target", None, raising=False)
    # a second copy of the kernel's module, decorated while TRITON_INTERPRET is set
    spec = importlib.util.spec_from_file_location("uva_gather_interpreted", gnnbook.ch5_minibatch.uva_gather.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = module.gather_rows
    ids = torch.tensor([499, 0, 7, 7, 250])
    assert torch.equal(triton_gather(table, ids, kernel=kernel), table[ids])
    wide = torch.rand(20, 1100)   # wider than one block of 1024: the kernel loops over the row
    assert torch.equal(triton_gather(wide, torch.tensor([19, 3]), kernel=kernel), wide[[19, 3]])
    with pytest.raises(ValueError, match="contiguous"):
        triton_gather(table.t(), ids, kernel=kernel)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.timeout(300)
def test_gpu_paths_deliver_the_same_rows_and_the_model_ranks_them():
    pytest.importorskip("dgl")     # its sampler draws the batches
    from gnnbook.data import load_dataset

    assert zero_copy_engine() in ("dgl", "triton")
    pinned = torch.zeros(100, 8)
    with PinnedInPlace(pinned) as same:
        assert same.is_pinned() and same.data_ptr() == pinned.data_ptr()
    graph = load_dataset("amazon-photo")
    batches = input_node_batches(graph, [10, 5], 256, 3, seed=0)
    features = torch.rand(graph.num_nodes(), 1024, generator=torch.Generator().manual_seed(0))
    # measure_device raises when a path delivers other rows than the pageable one
    times = {p: min(t) for p, t in measure_device(features, batches, repeats=7).items()}
    assert all(t > 0 for t in times.values())
    host = {p: fit_host([(r["rows"], r["width"], r[p]) for r in measure_host_grid(
        {b: input_node_batches(graph, [10, 5], b, 3, seed=0) for b in (16, 64, 256)}, [256, 1024],
        graph.num_nodes(), repeats=5, rounds=2)]) for p in ("pageable", "pinned")}
    model = LoadingModel(host=host).with_link(*measure_link())
    per_batch = [model.predict(len(b), 1024, b) for b in batches]
    modelled = {p: sum(t[p] for t in per_batch) / len(per_batch) for p in times}
    assert ranking_disagreements(modelled, times) == [], (modelled, times)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("width", [128, 1024])
def test_gpu_paths_on_skewed_ids_without_dgl(width):
    """The three paths on a real GPU with ids drawn as a sampler's input nodes are (repeats, a few hubs
    read often) but without DGL, so any CUDA build of torch runs it: every path delivers the pageable
    path's rows (measure_device checks), the zero-copy kernel reads the table pinned in place, and the
    cost model, fitted to this machine's host and link, ranks the paths as measured."""
    generator = torch.Generator().manual_seed(0)
    num_rows = 200_000
    hubs_first = torch.arange(1, num_rows + 1, dtype=torch.float64).pow(-0.8)     # Zipf-like reads
    batches = [torch.multinomial(hubs_first, 20_000, replacement=True, generator=generator) for _ in range(3)]
    features = torch.rand(num_rows, width, generator=generator)
    times = {p: min(t) for p, t in measure_device(features, batches, repeats=7).items()}
    by_size = {size: [torch.multinomial(hubs_first, size, replacement=True, generator=generator) for _ in range(3)]
               for size in (2_000, 8_000, 20_000)}
    host = {p: fit_host([(r["rows"], r["width"], r[p]) for r in measure_host_grid(
        by_size, [128, 1024], num_rows, repeats=5, rounds=2)]) for p in ("pageable", "pinned")}
    model = LoadingModel(host=host).with_link(*measure_link())
    per_batch = [model.predict(len(b), width, b) for b in batches]
    modelled = {p: sum(t[p] for t in per_batch) / len(per_batch) for p in times}
    print(f"width {width}: measured ms per batch", {p: round(1e3 * t, 3) for p, t in times.items()},
          "modelled", {p: round(1e3 * t, 3) for p, t in modelled.items()}, "engine", zero_copy_engine())
    assert ranking_disagreements(modelled, times) == [], (modelled, times)
