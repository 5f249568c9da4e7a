# Two commands: `make run` (install, then serve on 127.0.0.1:8000) and `make test`
# (install, then lint, type check, unit and integration tests). Both install into .venv.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint typecheck unit integration bench install clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt pip
	# torch first, pinned, so pip takes the CPU build instead of a multi-GB CUDA one.
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/skilldesk serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The fixture skills' handlers too, one mypy run each: every one is a module named "handler"
# in a folder that is not a package, so one run would see duplicates.
FIXTURE_HANDLERS := $(wildcard tests/fixtures/skills/*/*/handler.py)

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/mypy tests/fakellm tests/skillkit.py tests/rendezvous.py tests/workflowkit.py tests/bundledkit.py
	for handler in $(FIXTURE_HANDLERS); do $(BIN)/mypy "$$handler" || exit 1; done

unit: $(STAMP)
	$(BIN)/pytest tests/unit -q

integration: $(STAMP)
	$(BIN)/pytest tests/integration -q

test: lint typecheck
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV)
