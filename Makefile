# Every target installs what it needs first; `make install` is idempotent (a stamp tracks pyproject.toml).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test soak bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: install
	$(PY) -m sluice.proxy demo

test: install
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

# Hostile clients and a flood while 200,000 records go through (a few minutes; not part of `make test`).
soak: install
	$(PY) -m pytest -q -s -m soak tests/test_soak.py

bench: install
	$(PY) tests/bench/run_all.py --out docs/benchmarks.md

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) build *.egg-info
