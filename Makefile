# The two commands a newcomer runs: `make quickstart` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --constraint constraints.txt

.PHONY: quickstart test lint format mutants bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Stamp files: reinstall only when the dependency list or the pins change.
$(VENV)/.core: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e .
	@touch $@

$(VENV)/.dev: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e ".[dev]"
	@touch $(VENV)/.core $@

quickstart: $(VENV)/.core
	$(BIN)/honed train examples/quickstart.yaml --run-dir runs/quickstart --overwrite

# The dev extra installs Ray; HONED_REQUIRE_RAY turns a missing Ray into a failure of the Ray
# tests here (a plain `pytest` without Ray skips them, saying so).
test: $(VENV)/.dev
	HONED_REQUIRE_RAY=1 $(BIN)/python -m pytest -q

# Plants each of dev/mutants.py's GRPO bugs in turn and names the test that catches it; it edits
# src/honed/rl/, so run it in a checkout nobody is working in.
mutants: $(VENV)/.dev
	$(BIN)/python dev/mutants.py

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
