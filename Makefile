# The two commands of the README. Each sets up .venv (from requirements.lock) when it is missing or stale.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SCALE ?= ci
JOBS ?= 2

.PHONY: book test lab bench clean

$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

book: $(STAMP)
	$(VENV)/bin/icml25 build --scale $(SCALE) --jobs $(JOBS) --keep-going

test: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --durations=10

bench: $(STAMP)
	$(VENV)/bin/icml25 bench

lab: $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check jupyterlab
	$(VENV)/bin/jupyter lab notebooks

clean:
	rm -rf _build book/_results book/_toc.yml book/scorecard.md book/*/[0-9]*.ipynb
