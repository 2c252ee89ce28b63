"""The course website, built by Sphinx with MyST-NB from the executed notebooks of ``make course``.

Book: none (the course website).

Used in: no notebook directly.

The home page holds the chapter map (the book's nine chapters, with their
original titles, and the notebooks that cover each) and the course's claims
table; the navigation lists every notebook with its section headings, which
carry the book's section numbers and original titles.  The site works
offline: MathJax is served from the site itself (the copy that the
``jupyter-server-mathjax`` package ships), and no widget script is fetched
from a CDN.

Example:
    $ python -m gnnbook site --executed build/course --out build/site
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .course_run import SUMMARY, claims_table

# The book's chapters, with the original titles (COURSE_PLAN, "the original section titles").
BOOK_CHAPTERS = {
    1: "Introduction · 引言",
    2: "GNN models · 图神经网络模型",
    3: "Distributed parallel machine learning · 分布式并行机器学习",
    4: "Distributed parallel GNN training · 分布式并行图神经网络训练",
    5: "Minibatch distributed GNN training and optimisation · 小批次分布式并行图神经网络训练与优化",
    6: "Full-graph distributed GNN training and optimisation · 全图分布式并行图神经网络训练与优化",
    7: "Large-scale GNN systems · 大规模图神经网络系统",
    8: "Programming practice · 大规模图神经网络编程实践",
    9: "Summary and outlook · 总结与展望",
}
CHAPTER_OF = re.compile(r"^(?:lab)?(\d+)_")

CONF = '''\
project = "Parallel and Distributed GNN Training"
extensions = ["myst_nb"]
nb_execution_mode = "off"          # the notebooks were executed by `make course`
nb_ipywidgets_js = {}              # no widget scripts from a CDN: progress bars stay text
myst_enable_extensions = ["dollarmath", "amsmath"]
html_theme = "alabaster"
html_theme_options = {"sidebar_collapse": False, "font_family": "sans-serif", "head_font_family": "sans-serif"}
html_sidebars = {"**": ["navigation.html", "searchbox.html"]}
html_static_path = ["_static"]
# MathJax 2 from the site itself, so that pages render offline.
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML"
mathjax2_config = {"tex2jax": {"inlineMath": [["\\\\(", "\\\\)"]], "displayMath": [["\\\\[", "\\\\]"]],
                               "processEscapes": True}}
exclude_patterns = ["_build"]
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure"]
'''


def chapter_of(name: str) -> int | None:
    """The book chapter of a notebook file name (``03_distributed_ml`` and ``lab03_collectives`` are 3)."""
    match = CHAPTER_OF.match(name)
    return int(match.group(1)) if match else None


def notebook_title(path: Path) -> str:
    """The first Markdown heading of a notebook (its title), or its file name."""
    for cell in json.loads(Path(path).read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return Path(path).stem


def index_page(notebooks: list[Path], claims_rows: list[dict] | None) -> str:
    """The home page: chapter map, claims table and the navigation's table of contents."""
    chapters = [p for p in notebooks if not p.stem.startswith("lab")]
    labs = [p for p in notebooks if p.stem.startswith("lab")]
    lines = ["# Parallel and Distributed GNN Training · 大规模图神经网络分布式训练", "",
             "Every chapter of the course is a notebook that measures what the book claims and asserts it; "
             "these pages show one executed run of every notebook (`make course`).", "",
             "## Chapter map", "", "| book chapter | notebooks |", "|---|---|"]
    for number, title in BOOK_CHAPTERS.items():
        covered = [p for p in notebooks if chapter_of(p.stem) == number]
        links = ", ".join(f"[{notebook_title(p)}](notebooks/{p.stem}.ipynb)" for p in covered) or "not in this build"
        lines.append(f"| {number} {title} | {links.replace('|', '·')} |")
    lines += ["", "## Claims: published vs measured", ""]
    if claims_rows:
        lines.append(claims_table(claims_rows, markdown=True))
    else:
        lines.append("No claims table: run `make course` first.")
    for caption, group in (("Chapters", chapters), ("Labs", labs)):
        if group:
            lines += ["", "```{toctree}", f":caption: {caption}", ":maxdepth: 2", ""]
            lines += [f"notebooks/{p.stem}" for p in group]
            lines.append("```")
    return "\n".join(lines) + "\n"


def mathjax_dir() -> Path:
    """The MathJax 2 files shipped by ``jupyter-server-mathjax``."""
    import jupyter_server_mathjax

    return Path(jupyter_server_mathjax.__file__).parent / "static"


def build_site(executed: Path, out: Path, notebooks: list[Path] | None = None) -> Path:
    """Build the website from the executed notebooks in ``executed`` into ``out``; returns ``out/index.html``.

    ``out`` is replaced only when Sphinx succeeds.
    """
    executed, out = Path(executed), Path(out)
    notebooks = sorted(executed.glob("*.ipynb")) if notebooks is None else [Path(p) for p in notebooks]
    if not notebooks:
        raise FileNotFoundError(f"no executed notebooks in {executed}: run `make course` first")
    summary = executed / SUMMARY
    rows = json.loads(summary.read_text()) if summary.exists() else None
    with tempfile.TemporaryDirectory(prefix="gnnbook-site-") as tmp:
        src, html = Path(tmp) / "src", Path(tmp) / "html"
        (src / "notebooks").mkdir(parents=True)
        for nb in notebooks:
            shutil.copy(nb, src / "notebooks" / nb.name)
        (src / "conf.py").write_text(CONF)
        (src / "index.md").write_text(index_page(notebooks, rows))
        shutil.copytree(mathjax_dir(), src / "_static" / "mathjax")
        result = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(html)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"sphinx-build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(html), str(out))
    return out / "index.html"
