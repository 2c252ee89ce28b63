"""The container for those who cannot set up Linux and Python 3.11 (issue 23, item 8): no Docker
daemon here, so the Dockerfile is read instruction by instruction: Python 3.11, exactly the lock
file's install steps (the same as the Makefile's), and `make lab` as the command."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, comments dropped and continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    parsed = [tuple(line.split(None, 1)) for line in lines]
    assert all(len(p) == 2 and p[0].isupper() for p in parsed), [p for p in parsed if len(p) != 2 or not p[0].isupper()]
    return parsed


def test_the_image_is_python_3_11_with_the_locked_environment():
    steps = instructions()
    assert steps[0][0] == "FROM" and re.match(r"python:3\.11(-|$)", steps[0][1])
    installs = [cmd for op, cmd in steps if op == "RUN" for cmd in cmd.split("&&") if "pip install" in cmd]
    assert [c.split("pip install", 1)[1].split() for c in installs] == [
        ["--no-cache-dir", "--upgrade", '"pip>=23"'],
        ["--no-cache-dir", "-r", "requirements.lock"],
        ["--no-cache-dir", "--no-deps", "-e", "."]], installs
    makefile = (ROOT / "Makefile").read_text()   # the same steps as `make venv`
    assert "pip install --quiet -r requirements.lock" in makefile and "pip install --quiet --no-deps -e ." in makefile
    copies = [i for i, (op, _) in enumerate(steps) if op == "COPY"]
    lock_install = next(i for i, (_, cmd) in enumerate(steps) if "-r requirements.lock" in cmd)
    assert "requirements.lock" in steps[copies[0]][1] and copies[0] < lock_install < copies[1], \
        "the lock is copied and installed before the rest of the course (its own cached layer)"


def test_the_command_is_make_lab_and_the_build_leaves_host_files_out():
    steps = dict(instructions())
    command = json.loads(steps["CMD"])
    assert command[:2] == ["make", "lab"] and any("--ServerApp.ip=0.0.0.0" in c for c in command)
    assert "-p 127.0.0.1:8888:8888" in (ROOT / "Dockerfile").read_text(), "published to the host's loopback only"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv/", "build/", "release/", "handins/", "data/*"} <= set(ignored)
