"""The course website, built by Sphinx with MyST-NB from the executed notebooks of ``make course``.

Book: none (the course website).

Used in: no notebook directly.

The home page holds the chapter map (the book's nine chapters, with their
original titles, and the notebooks and labs that cover each, then the
industry labs beyond the book) and the course's claims table; the navigation lists every notebook with its section headings, which
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

import nbformat

from ..base.errors import UserError
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
# The labs beyond the book (recommendation, spatio-temporal, feature loading) have a row of their own.
INDUSTRY_LABS = "Industry labs (beyond the book) · 工业实践实验"
# A notebook's chapter: 03_distributed_ml, 05a_minibatch_..., lab03_collectives and lab05b_... (a part letter).
CHAPTER_OF = re.compile(r"^(?:lab)?(\d+)[a-z]?_")
# The font stack of the pages: Latin fonts first, then CJK fallbacks for the book's Chinese titles (Debian and
# Ubuntu: fonts-noto-cjk; Fedora: google-noto-sans-cjk-fonts), so they never show as empty boxes.
FONT_STACK = ("'Helvetica Neue', Arial, 'Noto Sans CJK SC', 'Source Han Sans SC', 'WenQuanYi Micro Hei', "
              "'Microsoft YaHei', 'PingFang SC', sans-serif")

CONF = '''\
FONT_STACK = "{font_stack}"        # CJK fallbacks for the Chinese titles
project = "Parallel and Distributed GNN Training"
extensions = ["myst_nb"]
nb_execution_mode = "off"          # the notebooks were executed by `make course`
nb_ipywidgets_js = {}              # no widget scripts from a CDN: progress bars stay text
myst_enable_extensions = ["dollarmath", "amsmath"]
html_theme = "alabaster"
html_theme_options = {"sidebar_collapse": False, "font_family": FONT_STACK, "head_font_family": FONT_STACK}
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
    """The number in a notebook file name (``03_distributed_ml``, ``05a_...``, ``lab03_collectives`` and
    ``lab05b_...`` give 3, 5, 3 and 5; the industry labs give 10-12)."""
    match = CHAPTER_OF.match(name)
    return int(match.group(1)) if match else None


def chapter_map(notebooks: list[Path]) -> dict[str, list[Path]]:
    """The home page's rows: each book chapter ("1 Introduction · 引言") with the notebooks and labs that cover it,
    then the industry labs (a number beyond the book's nine chapters), then any notebook without a number.
    Every notebook is in exactly one row."""
    rows: dict[str, list[Path]] = {f"{n} {title}": [] for n, title in BOOK_CHAPTERS.items()}
    rows[INDUSTRY_LABS] = []
    other: list[Path] = []
    for path in sorted(notebooks, key=lambda p: (p.stem.startswith("lab"), p.stem)):
        number = chapter_of(Path(path).stem)
        if number in BOOK_CHAPTERS:
            rows[f"{number} {BOOK_CHAPTERS[number]}"].append(path)
        elif number is not None:
            rows[INDUSTRY_LABS].append(path)
        else:
            other.append(path)
    if other:
        rows["Other notebooks"] = other
    return rows


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
    for row, covered in chapter_map(notebooks).items():
        links = ", ".join(f"[{notebook_title(p)}](notebooks/{p.stem}.ipynb)" for p in covered) or "not in this build"
        lines.append(f"| {row} | {links.replace('|', '·')} |")
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


def fold_solutions(notebook: Path, dest: Path) -> None:
    """Copy ``notebook`` to ``dest`` with every lab solution cell folded away on the page
    (MyST-NB's ``hide-input`` tag: the reader clicks to see the code), so that a student who
    reads the website after trying a lab sees the solution only when they ask for it."""
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source:
            tags = cell.metadata.setdefault("tags", [])
            if "hide-input" not in tags:
                tags.append("hide-input")
    nbformat.write(nb, dest)


def build_site(executed: Path, out: Path, notebooks: list[Path] | None = None) -> Path:
    """Build the website from the executed notebooks in ``executed`` into ``out``; returns ``out/index.html``.

    ``out`` is replaced only when Sphinx succeeds.
    """
    executed, out = Path(executed), Path(out)
    notebooks = sorted(executed.glob("*.ipynb")) if notebooks is None else [Path(p) for p in notebooks]
    if not notebooks:
        raise UserError(f"no executed notebooks in {executed}: the website shows the notebooks that `make course` "
                        "ran, so run `make course` first (all notebooks, ~15-20 min on 2 cores; "
                        "`make course NOTEBOOKS=\"chapters/02_gnn_models.ipynb\"` for a few), then `make site`.")
    summary = executed / SUMMARY
    rows = json.loads(summary.read_text()) if summary.exists() else None
    with tempfile.TemporaryDirectory(prefix="gnnbook-site-") as tmp:
        src, html = Path(tmp) / "src", Path(tmp) / "html"
        (src / "notebooks").mkdir(parents=True)
        for nb in notebooks:
            fold_solutions(nb, src / "notebooks" / nb.name)
        (src / "conf.py").write_text(CONF.replace("{font_stack}", FONT_STACK))
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
