# Every target installs what it needs first; `make install` is idempotent (a stamp tracks pyproject.toml).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test bench bench-quick lint clean

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

bench: install
	$(PY) tests/bench/run_all.py --out docs/benchmarks.md

# Issue 15's figures in under two minutes (not run by CI): exit 3 when one misses its target.
bench-quick: install
	$(PY) tests/bench/run_all.py --quick

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) build *.egg-info
