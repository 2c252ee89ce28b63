"""`make course` and `make site` on two tiny generated notebooks: claims table, executed copies, website."""
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

from gnnbook.course.commands import REPO_ROOT as ROOT
from gnnbook.course.course_run import RUNS_LAST, claims_table, default_notebooks, gather_claims, report, run_course
from gnnbook.course.site import ANSWERS_TAG, build_site

PARAMETERS = "results_path = None   # papermill: write the claims here\n"
CHAPTER = """\
import matplotlib.pyplot as plt
from gnnbook.course.claims import Claims

measured = sum(range(10))
claims = Claims("01_tiny")
assert claims.add("the sum of 0..9", kind="model", source="our model: Gauss, 1786, eq. 1", published="45", \
measured=str(measured),
                  holds=measured == 45)
claims.add("a claim that does not hold", kind="measurement", source="our measurement", published="1", \
measured="2", holds=False)
plt.plot([0, 1], [1, 0])
plt.title("a figure")
plt.show()
claims.write(results_path, {"sum": measured})
"""

ANSWERS = "<details>\n<summary>Answers</summary>\n\n1. The answer_of_exercise_one is 45.\n\n</details>"


def tiny_notebook(path: Path, title: str, body: str) -> Path:
    parameters = nbformat.v4.new_code_cell(PARAMETERS, metadata={"tags": ["parameters"]})
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(f"# {title}\n\nSome text with math, $a^2 + b^2$."),
        parameters,
        nbformat.v4.new_markdown_cell("## 1.1 Graph neural networks · 图神经网络"),
        nbformat.v4.new_code_cell(body)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    folder = tmp_path_factory.mktemp("course")
    chapter = nbformat.read(tiny_notebook(folder / "01_tiny.ipynb", "Chapter 1 · 引言", CHAPTER), as_version=4)
    chapter.cells += [nbformat.v4.new_markdown_cell("## Exercises\n\n1. Sum 0..9."),
                      nbformat.v4.new_markdown_cell(ANSWERS, metadata={"tags": [ANSWERS_TAG]})]
    nbformat.write(chapter, folder / "01_tiny.ipynb")
    notebooks = [folder / "01_tiny.ipynb",
                 tiny_notebook(folder / "lab01_quiet.ipynb", "Lab 1 · 实验",
                               "x = 1\n### BEGIN SOLUTION\nanswer_of_lab_one = 42\n### END SOLUTION\nassert x == 1\n")]
    out = folder / "executed"
    return run_course(notebooks, out, timeout_s=120), out


def test_course_table_has_every_claim_and_a_row_for_a_notebook_without_claims(course):
    runs, out = course
    assert [r.notebook for r in runs] == ["01_tiny", "lab01_quiet"]
    assert all(r.executed.exists() and r.error is None for r in runs)
    rows = [row for run in runs for row in run.rows()]
    assert [r["holds"] for r in rows] == [True, False, None]
    assert (rows[0]["source"] == "our model: Gauss, 1786, eq. 1" and rows[0]["kind"] == "model"
            and rows[0]["measured"] == "45")
    assert "no claims recorded" in rows[2]["claim"]
    table, passed = report(runs)
    assert not passed, "a claim that does not hold fails the course run"
    assert "the sum of 0..9" in table and "NO" in table and "Gauss" in table
    assert (out / "claims.json").exists()
    assert claims_table(rows, markdown=True).count("\n") == len(rows) + 1


def test_chapter_9_runs_after_every_other_notebook_it_collects():
    names = [p.name for p in default_notebooks(ROOT)]
    assert names[-1] == RUNS_LAST and names[0].startswith("01_") and any(n.startswith("lab") for n in names)


def test_a_failing_notebook_gets_a_row_saying_so(tmp_path):
    nb = tiny_notebook(tmp_path / "02_broken.ipynb", "Broken · 坏", "raise ValueError('on purpose')\n")
    (run,) = run_course([nb], tmp_path / "out", timeout_s=120)
    assert run.error and "ValueError" in run.error
    assert run.rows()[0]["claim"].startswith("notebook failed") and run.rows()[0]["holds"] is False


def test_chapter_9_gathers_the_course_run_and_runs_only_what_it_lacks(course, tmp_path):
    """gather_claims reads make course's claims.json and runs (papermill) only notebooks it does not cover."""
    _, out = course
    extra = tiny_notebook(tmp_path / "03_extra.ipynb", "Extra · 额外", CHAPTER.replace("01_tiny", "03_extra"))
    rows, ran = gather_claims(tmp_path, out, ["01_tiny.ipynb", extra.name], tmp_path / "now")
    assert ran == [extra.name], "01_tiny is in claims.json: not run again"
    assert [(r["notebook"], r["source_run"]) for r in rows if r["holds"] is not None] == [
        ("01_tiny", "make course"), ("01_tiny", "make course"), ("03_extra", "run now"), ("03_extra", "run now")]


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids, self.images = [], set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        for key in ("href", "src"):
            if attrs.get(key) is not None:
                self.links.append((tag, attrs[key]))
        if tag == "img":
            self.images.append(attrs.get("src"))


BIB = """@article{gauss2001sums,
  author = {Carl Friedrich Gauss}, title = {On Sums}, journal = {Nowhere}, year = {1786}, doi = {10.0000/sums},
}
"""


def test_students_edition_has_no_solution_and_the_teachers_folds_it(course, tmp_path):
    import json
    import shutil

    from gnnbook.course.course_run import SUMMARY

    executed = shutil.copytree(course[1], tmp_path / "executed")
    rows = json.loads((executed / SUMMARY).read_text())
    rows[0]["source"] = "gauss2001sums, eq. 1"      # a source that names its references.bib key
    (executed / SUMMARY).write_text(json.dumps(rows))
    bib = tmp_path / "references.bib"
    bib.write_text(BIB)
    students = build_site(executed, tmp_path / "site", bibfile=bib).parent
    pages = re.sub(r"<[^>]+>", "", "".join(p.read_text() for p in students.rglob("*.html")))   # text, not markup
    sources = "".join(p.read_text() for p in students.rglob("*.ipynb"))    # what the download button gives
    assert "answer_of_lab_one" not in pages + sources and "raise NotImplementedError()" in pages, \
        "the students' edition: the solution region is a stub, on the page and in the download"
    assert "answer_of_exercise_one" not in pages + sources, "the students' edition has no exercise answers"
    assert "solutions are not in it" in (students / "index.html").read_text()
    references = (students / "references.html").read_text()
    assert "on sums" in references.lower() and "doi.org/10.0000/sums" in references, "references.bib on its own page"
    claims = (students / "claims.html").read_text()
    assert 'href="references.html#' in claims, "a claim's source links to its reference (gauss2001sums)"
    teachers = build_site(executed, tmp_path / "site-solutions", solutions=True, bibfile=bib).parent
    lab = (teachers / "notebooks" / "lab01_quiet.html").read_text()
    folded = re.search(r"<details[^>]*>(?:(?!</details>).)*answer_of_lab_one", lab, re.S)
    assert folded, "the solutions edition: a lab's solution is on its page folded away, shown on a click"
    chapter = (teachers / "notebooks" / "01_tiny.html").read_text()
    assert re.search(r"<details[^>]*>(?:(?!</details>).)*answer_of_exercise_one", chapter, re.S), \
        "the solutions edition: a chapter's exercise answers are on its page, folded"
    assert "solutions" in (teachers / "index.html").read_text()


def test_site_has_every_page_image_and_link_and_needs_no_network(course):
    _, executed = course
    index = build_site(executed, executed.parent / "site")
    site = index.parent
    # the pages (the theme also copies a Jinja template, webpack-macros.html, among its static files)
    pages = {p: _Links() for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts}
    for page, parser in pages.items():
        parser.feed(page.read_text())
    names = {p.relative_to(site).as_posix() for p in pages}
    assert {"index.html", "claims.html", "references.html", "notebooks/01_tiny.html",
            "notebooks/lab01_quiet.html"} <= names
    home = index.read_text()
    assert "Chapter map" in home and "引言" in home and "claims.html" in home, "chapter map, a link to the claims"
    assert "the sum of 0..9" in (site / "claims.html").read_text(), "the claims table on its own page"
    assert "1.1 Graph neural networks · 图神经网络" in home, "section titles in the navigation"
    tiny = (site / "notebooks" / "01_tiny.html").read_text()
    assert "01_tiny.ipynb" in tiny and (site / "_sources" / "notebooks" / "01_tiny.ipynb").is_file(), \
        "the download button gives the page's notebook"
    figures = [o for c in nbformat.read(executed / "01_tiny.ipynb", as_version=4).cells
               for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(figures) == 1 and len(pages[site / "notebooks" / "01_tiny.html"].images) >= 1, "the figure"
    for page, parser in pages.items():
        for tag, link in parser.links:
            parts = urlsplit(link)
            if tag in ("script", "link", "img"):
                assert not parts.scheme and not link.startswith("//"), f"{page.name} loads {link} from the network"
            if parts.scheme or link.startswith("//") or link.startswith("mailto:"):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            assert target.exists(), f"{page.relative_to(site)} links to a missing {link}"
            if parts.fragment and target.suffix == ".html" and target in pages:
                assert parts.fragment in pages[target].ids, f"{page.relative_to(site)}: no anchor {link}"
    css = "".join(p.read_text() for p in (site / "_static").glob("*.css"))
    assert "Noto Sans CJK SC" in css and "WenQuanYi Micro Hei" in css, "a font stack with CJK fallbacks"
    mathjax = site / "_static" / "mathjax" / "MathJax.js"
    assert mathjax.exists() and "mathjax/MathJax.js" in (site / "notebooks" / "01_tiny.html").read_text()


def test_chapter_map_has_every_notebook_of_the_course():
    """Every notebook in chapters/ and labs/ is in exactly one row of the home page's map; 05a..06c and lab05b under
    their chapters, the industry labs (10-12) in a row of their own."""
    from gnnbook.course.site import BOOK_CHAPTERS, INDUSTRY_LABS, chapter_map, index_page

    notebooks = sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("labs/*.ipynb")])
    assert len(notebooks) >= 27
    rows = chapter_map(notebooks)
    placed = [p for covered in rows.values() for p in covered]
    missing = sorted(p.name for p in notebooks if p not in placed)
    assert not missing, f"not on the chapter map: {missing}"
    assert len(placed) == len(set(placed)) == len(notebooks), "each notebook in one row"
    assert "Other notebooks" not in rows
    five = {p.stem for p in rows[f"5 {BOOK_CHAPTERS[5]}"]}
    assert {"05a_minibatch_training_and_sampling", "05g_historical_embeddings", "lab05b_historical_embeddings"} <= five
    assert {p.stem[:5] for p in rows[INDUSTRY_LABS]} == {"lab10", "lab11", "lab12"}
    page = index_page(notebooks, None)
    assert all(f"(notebooks/{p.stem}.ipynb)" in page for p in notebooks)
    assert INDUSTRY_LABS in page and "run `make course` first" in page


def test_site_before_make_course_says_to_run_it(tmp_path, capsys):
    from gnnbook.cli import main

    assert main(["site", "--executed", str(tmp_path / "build" / "course"), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert "run `make course` first" in err and "Traceback" not in err and not (tmp_path / "site").exists()
