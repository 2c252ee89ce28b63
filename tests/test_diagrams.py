"""The concept figures (gnnbook.course.diagrams) show what the package computes, and every notebook has a figure."""
from pathlib import Path

import dgl
import matplotlib
import nbformat
import pytest
import torch

matplotlib.use("Agg")

from gnnbook.base.seeding import sampling_on_one_thread, set_seed  # noqa: E402
from gnnbook.ch6_fullgraph.subgraph import local_graph  # noqa: E402
from gnnbook.course import diagrams  # noqa: E402
from gnnbook.data import load_dataset  # noqa: E402
from gnnbook.training.minibatch import neighbor_loader  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# a cell draws a figure when it calls one of these
DRAWS = ("plt.show", "plt.subplots", "diagrams.", "plot_timelines", ".plot(")


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


@pytest.mark.parametrize("stages, microbatches", [(1, 1), (2, 8), (4, 4), (4, 16)])
def test_pipeline_grid_idles_as_gpipe_predicts(stages, microbatches):
    fig, idle = diagrams.pipeline_schedule(stages, microbatches)
    assert len(fig.axes[0].patches) == stages * microbatches
    assert idle == pytest.approx((stages - 1) / (microbatches + stages - 1))


def test_distdgl_figure_has_every_process_of_the_job():
    fig = diagrams.distdgl_processes(num_machines=3, trainers_per_machine=2, samplers_per_trainer=2)
    texts = _texts(fig)
    assert sum(t.startswith("graph server") for t in texts) == 3
    assert sorted(t for t in texts if t.startswith("trainer")) == sorted(f"trainer\n{r}" for r in range(6))
    assert texts.count("sampler") == 12
    with pytest.raises(ValueError, match="at least one machine"):
        diagrams.distdgl_processes(num_machines=0)


def test_halo_figure_agrees_with_the_full_graph_trainers_halo():
    import networkx as nx

    fig, counts = diagrams.halo_exchange(num_parts=2)
    club = nx.karate_club_graph()
    graph = dgl.from_networkx(club)            # both directions of every edge
    assignment = torch.tensor([int(club.nodes[n]["club"] != "Mr. Hi") for n in club])
    for row in counts:                          # the halo chapter 6's trainer exchanges, part by part
        part = local_graph(graph, assignment, row["part"], "sage")
        assert row["owned"] == len(part.owned) and row["halo"] == len(part.halo), row
    assert counts[0]["cut_edges"] == counts[1]["cut_edges"] > 0
    assert len(diagrams.halo_exchange(num_parts=3)[1]) == 3


def test_block_figure_counts_the_sampled_nodes():
    graph = load_dataset("cora")
    seeds = graph.ndata["train_mask"].nonzero().squeeze(1)[:4]
    set_seed(0)
    with sampling_on_one_thread():
        _, _, blocks = next(iter(neighbor_loader(graph, seeds, [3, 3], 4)))
    fig, columns = diagrams.minibatch_blocks(blocks)
    assert columns == [blocks[0].num_src_nodes(), blocks[0].num_dst_nodes(), blocks[1].num_dst_nodes()]
    assert columns[-1] == 4
    drawn = sum(len(ax.lines) for ax in fig.axes)
    assert drawn == sum(b.num_edges() for b in blocks)    # every sampled edge, none made up


def test_the_other_figures_draw():
    assert len(diagrams.parallelism_forms().axes) == 3
    assert len(diagrams.push_and_pull(layers=3).axes) == 2
    assert len(diagrams.cache_hierarchy().axes[0].patches) == 3


@pytest.mark.parametrize("notebook", sorted(p.relative_to(ROOT).as_posix() for p in
                                            [*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("labs/*.ipynb")]))
def test_every_notebook_has_a_figure(notebook):
    nb = nbformat.read(ROOT / notebook, as_version=4)
    assert any(any(d in c.source for d in DRAWS) for c in nb.cells if c.cell_type == "code"), \
        f"{notebook} draws no figure: add one (gnnbook.course.diagrams has the concept figures)"
