# Two commands on a fresh machine: `make demo` runs the main job, `make test` runs the tests.
# Both create .venv and install everything from this repo's own files.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
MUACTL := $(VENV)/bin/muactl
STAMP  := $(VENV)/.installed-stamp

.PHONY: test test-all demo bench lint clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU torch first: on our CPU machines pip finds this pinned CPU build locally; an unpinned torch would pull a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,mcp]'
	touch $(STAMP)

test: $(STAMP)  ## the default suite (under 10 minutes); slow tests are marked and skipped
	$(PY) -m pytest -q -m "not slow"

test-all: $(STAMP)  ## everything, slow tests included
	$(PY) -m pytest -q

demo: $(STAMP)  ## the main job on the embedded default
	bash examples/demo.sh

bench: $(STAMP)  ## print the performance figures
	$(PY) benchmarks/domains.py

lint: $(STAMP)
	$(VENV)/bin/ruff check muactl tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache out
