# The two commands of the README. Each sets up .venv (from requirements.lock) when it is missing or stale.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SCALE ?= ci
JOBS ?= 2

.PHONY: book test test-all lab bench clean sandbox

$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

# The efficient_code chapter runs generated code only inside bubblewrap (Debian package `bubblewrap`).
sandbox:
	@command -v bwrap >/dev/null || { if [ "$$(id -u)" = 0 ]; then apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; else \
	  echo "bubblewrap is missing: sudo apt-get install bubblewrap (generated code runs only inside it)" >&2; \
	  exit 1; fi; }

book: $(STAMP) sandbox
	$(VENV)/bin/icml25 build --scale $(SCALE) --jobs $(JOBS) --keep-going

# `make test`: the unit tests and one smoke run of every notebook. `make test-all` (what CI runs) adds each
# notebook's nbval re-run (marker `rerun`), which compares a second execution with the first cell by cell.
# --dist loadgroup: a notebook's smoke run and its re-run (tests/test_notebooks.py) share a worker, so the re-run
# compares with the executed copy instead of executing the notebook a third time. --durations=30 lists where the
# time went. tests/conftest.py builds the compiled kernels once before the workers start.
PYTEST := $(PY) -m pytest -n $(JOBS) --dist loadgroup --durations=30

test: $(STAMP) sandbox
	$(PYTEST) -m "not rerun"

test-all: $(STAMP) sandbox
	$(PYTEST)

bench: $(STAMP)
	$(VENV)/bin/icml25 bench

lab: $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check jupyterlab
	$(VENV)/bin/jupyter lab notebooks

clean:
	rm -rf _build book/_results book/_toc.yml book/scorecard.md book/*/[0-9]*.ipynb
