"""README is the front door (issue 23): it names what a newcomer needs and a path through every notebook."""
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

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


def _bash_block(title: str) -> list[str]:
    block = re.search(r"```bash\n(.*?)```", section(title), re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


@pytest.mark.timeout(900)
def test_working_alone_commands_as_written():
    """README's self-study commands, run verbatim from the repository root (all but `make lab`,
    which opens JupyterLab): the blank lab grades zero, each task with the reason; the teacher's
    block gives the same release and autograde commands."""
    alone = _bash_block("## Working alone")
    teacher = _bash_block("## For teachers")
    assert "make release" in alone and "make release" in teacher
    assert "make autograde SUBMISSIONS=handins" in alone and "make autograde SUBMISSIONS=handins" in teacher
    if (ROOT / "release").exists() or (ROOT / "handins").exists():
        pytest.skip("release/ or handins/ exists in this checkout: move them away (this test writes both)")
    try:
        outputs = []
        for command in alone:
            if command.startswith("make lab"):
                continue
            run = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=600)
            assert run.returncode == 0, f"{command}: {run.stdout[-2000:]}{run.stderr[-2000:]}"
            outputs.append(run.stdout)
        rows = [line.split() for line in outputs[-1].splitlines() if line.startswith("me ")]
        tasks = [r for r in rows if r[2].startswith("task")]
        assert tasks and all(r[1] == "lab03_collectives" and r[3].startswith("0/") for r in tasks), outputs[-1]
        assert all(len(r) > 4 for r in tasks), f"every task says why it scored zero: {outputs[-1]}"
    finally:
        shutil.rmtree(ROOT / "release", ignore_errors=True)
        shutil.rmtree(ROOT / "handins", ignore_errors=True)
