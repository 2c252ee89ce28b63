"""README is the front door (issue 23): it names what a newcomer needs and a path through every notebook."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
NOTEBOOKS = sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("labs/*.ipynb")])


def section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n## ", start + len(title))
    return README[start:] if end < 0 else README[start:end]


def test_the_syllabus_and_the_path_have_every_notebook():
    syllabus = section("### A 13-week syllabus")
    missing = [p.stem for p in NOTEBOOKS if f"`{p.stem}`" not in syllabus]
    assert not missing, f"notebooks missing from README's syllabus: {missing}"
    path = section("## Start here")
    short = {p.stem.split("_")[0] for p in NOTEBOOKS}
    assert not [s for s in short if not re.search(rf"(?<![\w]){s}(?![\w])", path)], "the reading order names each"


def test_readme_and_pyproject_agree_on_python_3_11():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == "==3.11.*"
    assert "Python 3.11 exactly" in README and "uv python install 3.11" in README


def test_licence_files_exist_and_readme_names_them():
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert "creativecommons.org/licenses/by-sa/4.0/legalcode" in (ROOT / "LICENSE-CONTENT").read_text()
    citation = (ROOT / "CITATION.cff").read_text()
    assert "cff-version: 1.2.0" in citation and "license: MIT" in citation and "doi" not in citation.lower()
    licence = section("## Licence")
    assert all(name in licence for name in ("LICENSE", "LICENSE-CONTENT", "CITATION.cff", "data/README.md"))
