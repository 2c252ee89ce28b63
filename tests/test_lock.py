"""One locked environment (issue 23, item 2): ``requirements.lock`` pins every package exactly, it
satisfies every pin of ``pyproject.toml``, ``make lab``/``make test`` install from it, and the
environment the tests run in is the locked one."""
import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"


def locked() -> dict[str, str]:
    """Package name (canonical) -> the version the lock pins."""
    pins = {}
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)", line.strip())
        assert match, f"requirements.lock: {line!r} is not an exact pin (name==version)"
        pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def test_the_lock_satisfies_every_pin_of_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = locked()
    for text in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} (pyproject.toml) is missing from requirements.lock: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock has {name}=={pins[name]}, outside pyproject.toml's {text!r}: run `make lock`")
    assert "Python 3.11" in LOCK.read_text(), "the lock is resolved for the course's Python"


def test_make_installs_from_the_lock():
    makefile = (ROOT / "Makefile").read_text()
    rule = re.search(r"^\$\(STAMP\):(.*?)\n\n", makefile, re.S | re.M).group(0)
    assert "requirements.lock" in rule.splitlines()[0], "the environment is rebuilt when the lock changes"
    assert "pip install --quiet -r requirements.lock" in rule
    assert "pip install --quiet --no-deps -e ." in rule, "the course itself adds no unlocked package"
    environment = (ROOT / "environment.yml").read_text()
    assert "-r requirements.lock" in environment


def test_this_environment_is_the_locked_one():
    pins = locked()
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    # pip upgrades itself before the lock is installed, and a hand-upgraded pip changes no course result
    differ = {name: (version, installed.get(name)) for name, version in pins.items()
              if name != "pip" and installed.get(name) != version}
    assert not differ, f"installed packages differ from requirements.lock (locked, installed): {differ}; `make venv`"
