"""The course website, built by Sphinx with MyST-NB from the executed notebooks of ``make course``.

Book: none (the course website).

Used in: no notebook directly.

The pages are in the book theme (sphinx-book-theme: a download button on every page gives its
notebook).  The home page holds the chapter map (the book's nine chapters, with their original
titles, and the notebooks and labs that cover each, then the industry labs beyond the book); the
claims table and the references (``references.bib``, by sphinxcontrib-bibtex) are pages of their
own; the navigation lists every notebook with its section headings, which carry the book's section
numbers and original titles.  Two editions: the students' (no lab solution or exercise answer
anywhere) and the teachers' (``--solutions``: each solution and each chapter's answers folded on its page).  The site
works offline: MathJax is served from the site itself (the copy that the
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
from .claims import source_key
from .course_run import SUMMARY, claims_table
from .conventions import as_released
from .release import BEGIN_SOLUTION

BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
# A chapter's exercise answers: a markdown cell with this tag after its "## Exercises" cell, folded in an HTML
# <details> block (Jupyter and the site show it closed until clicked).  Only the teachers' edition has it.
ANSWERS_TAG = "answers"
# nbgrader's hidden tests, marked as release.py marks them
_HIDDEN = re.compile(rf"^[ \t]*{BEGIN_HIDDEN}\n.*?^[ \t]*{END_HIDDEN}[ \t]*\n?", re.S | re.M)
# The papers and datasets the course cites (the References page), at the repository's root.
BIBFILE = Path(__file__).resolve().parents[2] / "references.bib"
_BIB_KEY = re.compile(r"^@\w+\s*\{\s*([^,\s]+)\s*,", re.M)

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
extensions = ["myst_nb", "sphinxcontrib.bibtex"]
nb_execution_mode = "off"          # the notebooks were executed by `make course`
nb_ipywidgets_js = {}              # no widget scripts from a CDN: progress bars stay text
myst_enable_extensions = ["dollarmath", "amsmath"]
bibtex_bibfiles = {bibfiles}
bibtex_default_style = "plain"
html_title = "Parallel and Distributed GNN Training{edition}"
html_theme = "sphinx_book_theme"
# The download button offers each page's notebook (.ipynb) and a printable page; nothing links out.
html_theme_options = {"use_download_button": True, "use_fullscreen_button": False, "show_toc_level": 2,
                      "home_page_in_toc": True, "use_repository_button": False, "navigation_with_keys": False}
html_static_path = ["_static"]
html_css_files = ["fonts.css"]
html_copy_source = True            # the download button serves the notebooks from _sources
# MathJax 2 from the site itself, so that pages render offline.
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML"
mathjax2_config = {"tex2jax": {"inlineMath": [["\\\\(", "\\\\)"]], "displayMath": [["\\\\[", "\\\\]"]],
                               "processEscapes": True}}
exclude_patterns = ["_build"]
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure"]
'''
# The theme's fonts, with CJK fallbacks (pydata-sphinx-theme reads these variables).
FONTS_CSS = ":root {{ --pst-font-family-base: {stack}; --pst-font-family-heading: {stack}; }}\n"


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


def index_page(notebooks: list[Path], claims_rows: list[dict] | None, solutions: bool = False) -> str:
    """The home page: the chapter map and the navigation's table of contents (chapters, labs, then the
    claims table and the references, each a page of its own)."""
    chapters = [p for p in notebooks if not p.stem.startswith("lab")]
    labs = [p for p in notebooks if p.stem.startswith("lab")]
    edition = ("This is the **solutions** edition: each lab's solution is on its page, folded (click to show)."
               if solutions else "This is the students' edition: the labs' solutions are not in it "
               "(a teacher builds the solutions edition with `make site`).")
    lines = ["# Parallel and Distributed GNN Training · 大规模图神经网络分布式训练", "",
             "Every chapter of the course is a notebook that measures what the book claims and asserts it; "
             "these pages show one executed run of every notebook (`make course`). Each page's download button "
             "gives its notebook. " + edition, "",
             "## Chapter map", "", "| book chapter | notebooks |", "|---|---|"]
    for row, covered in chapter_map(notebooks).items():
        links = ", ".join(f"[{notebook_title(p)}](notebooks/{p.stem}.ipynb)" for p in covered) or "not in this build"
        lines.append(f"| {row} | {links.replace('|', '·')} |")
    lines += ["", "The claims every notebook measured, against the papers: [Claims](claims.md). "
              "Every paper and dataset cited: [References](references.md).",
              "" if claims_rows else "(No claims table yet: run `make course` first.)"]
    for caption, group in (("Chapters", chapters), ("Labs", labs)):
        if group:
            lines += ["", "```{toctree}", f":caption: {caption}", ":maxdepth: 2", ""]
            lines += [f"notebooks/{p.stem}" for p in group]
            lines.append("```")
    lines += ["", "```{toctree}", ":caption: The course", "", "claims", "references", "```"]
    return "\n".join(lines) + "\n"


def bib_keys(bibfile: Path | None) -> set[str]:
    """The entry keys of a BibTeX file (none without one)."""
    return set(_BIB_KEY.findall(Path(bibfile).read_text())) if bibfile else set()


def cited(source: str, keys: set[str]) -> str:
    """A claim's source with its leading references.bib key (``kipf2017gcn, table 2``) as a citation that
    links to the References page; a source that names no key is left as it is.

    Example:
        >>> cited("kipf2017gcn, table 2", {"kipf2017gcn"})
        '{cite:p}`kipf2017gcn`, table 2'
    """
    key = source_key(source)
    return f"{{cite:p}}`{key}`{source[len(key):]}" if key in keys else source


def claims_page(claims_rows: list[dict] | None, keys: set[str] = frozenset()) -> str:
    """The claims table of ``make course``: each claim, its kind and source (linked to its reference),
    published and measured."""
    if not claims_rows:
        return "# Claims: published vs measured\n\nNo claims table: run `make course` first.\n"
    rows = [dict(r, source=cited(str(r["source"]), keys)) for r in claims_rows]
    return "# Claims: published vs measured\n\n" + claims_table(rows, markdown=True) + "\n"


def references_page(bibfile: Path | None) -> str:
    """Every entry of ``references.bib`` (the papers and datasets the claims cite), by sphinxcontrib-bibtex."""
    if bibfile is None:
        return "# References\n\nNo references.bib in this build.\n"
    return ("# References\n\nThe papers and datasets the course cites; a claim's source names its key "
            "(for example `kipf2017gcn, table 2`).\n\n```{bibliography}\n:all:\n```\n")


def mathjax_dir() -> Path:
    """The MathJax 2 files shipped by ``jupyter-server-mathjax``."""
    import jupyter_server_mathjax

    return Path(jupyter_server_mathjax.__file__).parent / "static"


def page_notebook(notebook: Path, dest: Path, solutions: bool) -> None:
    """Copy ``notebook`` to ``dest`` as its page shows it.  Solutions edition: every lab solution cell folded
    away (MyST-NB's ``hide-input`` tag: the reader clicks to see the code).  Students' edition: each solution
    region replaced by the stub a student gets (nbgrader's) and the cell's outputs dropped, and hidden tests
    removed, so the page holds no line of an answer; a chapter's exercise answers (a markdown cell tagged
    :data:`ANSWERS_TAG`) are dropped from the students' edition and stay folded in the teachers'."""
    nb = nbformat.read(notebook, as_version=4)
    if not solutions:
        nb.cells = [c for c in nb.cells if ANSWERS_TAG not in c.metadata.get("tags", [])]
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if solutions and BEGIN_SOLUTION in cell.source:
            tags = cell.metadata.setdefault("tags", [])
            if "hide-input" not in tags:
                tags.append("hide-input")
        elif not solutions and (BEGIN_SOLUTION in cell.source or BEGIN_HIDDEN in cell.source):
            cell.source = _HIDDEN.sub("", as_released(cell.source))
            cell.outputs = []
    nbformat.write(nb, dest)


def build_site(executed: Path, out: Path, notebooks: list[Path] | None = None, solutions: bool = False,
               bibfile: Path | None = BIBFILE) -> Path:
    """Build the website from the executed notebooks in ``executed`` into ``out``; returns ``out/index.html``.
    ``solutions``: the teachers' edition, with the labs' solutions folded on their pages (the students'
    edition has none).  ``out`` is replaced only when Sphinx succeeds.

    Example:
        >>> build_site(Path("build/course"), Path("build/site"))  # doctest: +SKIP
        PosixPath('build/site/index.html')
    """
    executed, out = Path(executed), Path(out)
    notebooks = sorted(executed.glob("*.ipynb")) if notebooks is None else [Path(p) for p in notebooks]
    if not notebooks:
        raise UserError(f"no executed notebooks in {executed}: the website shows the notebooks that `make course` "
                        "ran, so run `make course` first (all notebooks, ~15-20 min on 2 cores; "
                        "`make course NOTEBOOKS=\"chapters/02_gnn_models.ipynb\"` for a few), then `make site`.")
    summary = executed / SUMMARY
    rows = json.loads(summary.read_text()) if summary.exists() else None
    bibfile = bibfile if bibfile is not None and Path(bibfile).is_file() else None
    with tempfile.TemporaryDirectory(prefix="gnnbook-site-") as tmp:
        src, html = Path(tmp) / "src", Path(tmp) / "html"
        (src / "notebooks").mkdir(parents=True)
        for nb in notebooks:
            page_notebook(nb, src / "notebooks" / nb.name, solutions)
        (src / "conf.py").write_text(CONF.replace("{font_stack}", FONT_STACK)
                                     .replace("{bibfiles}", repr(["references.bib"] if bibfile else []))
                                     .replace("{edition}", " (solutions)" if solutions else ""))
        (src / "index.md").write_text(index_page(notebooks, rows, solutions))
        (src / "claims.md").write_text(claims_page(rows, bib_keys(bibfile)))
        (src / "references.md").write_text(references_page(bibfile))
        if bibfile:
            shutil.copy(bibfile, src / "references.bib")
        shutil.copytree(mathjax_dir(), src / "_static" / "mathjax")
        (src / "_static" / "fonts.css").write_text(FONTS_CSS.format(stack=FONT_STACK))
        result = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(html)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"sphinx-build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(html), str(out))
    return out / "index.html"
