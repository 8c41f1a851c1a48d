# Two commands on a fresh machine: `make demo` runs the main job, `make test` runs the tests.
# Both create .venv and install everything from this repo's own files.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
MUACTL := $(VENV)/bin/muactl
STAMP  := $(VENV)/.installed-stamp

.PHONY: test test-all demo bench lint lock clean

# constraints.txt pins every package to the versions CI tested (torch to the CPU build, which pip finds on
# our machines' disk; an unpinned torch would pull a multi-GB CUDA build).
$(STAMP): pyproject.toml setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,mcp,openenv,gym]'
	$(PY) -m pip install -q -c constraints.txt --no-deps openenv  # why --no-deps: see the openenv extra in pyproject.toml
	touch $(STAMP)

test: $(STAMP)  ## the default suite (under 10 minutes); slow tests are marked and skipped
	$(PY) -m pytest -q -m "not slow" --durations=15

test-all: $(STAMP)  ## everything, slow tests included
	$(PY) -m pytest -q

demo: $(STAMP)  ## the main job on the embedded default
	bash examples/demo.sh

bench: $(STAMP)  ## print the performance figures
	$(PY) benchmarks/domains.py

lint: $(STAMP)
	$(VENV)/bin/ruff check muactl tests benchmarks

# Refresh the pins on purpose: resolve the newest versions pyproject allows in a scratch venv, freeze them,
# then rebuild .venv from the new pins and run the suite. Commit constraints.txt only if it passes.
LOCKVENV := .lock-venv
lock:
	rm -rf $(LOCKVENV)
	$(PYTHON) -m venv $(LOCKVENV)
	$(LOCKVENV)/bin/python -m pip install -q --upgrade pip
	$(LOCKVENV)/bin/python -m pip install -q torch==2.13.0
	$(LOCKVENV)/bin/python -m pip install -q '.[dev,mcp,openenv,gym]'
	$(LOCKVENV)/bin/python -m pip install -q --no-deps 'openenv==0.10.0'
	head -n 3 constraints.txt > constraints.new
	$(LOCKVENV)/bin/python -m pip freeze --all --exclude-editable | grep -iv '^muactl' >> constraints.new
	mv constraints.new constraints.txt
	rm -rf $(LOCKVENV) $(VENV)
	$(MAKE) test

clean:
	rm -rf $(VENV) $(LOCKVENV) build *.egg-info .pytest_cache out
