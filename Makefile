# Every target installs what it needs first; `make install` is idempotent (a stamp tracks pyproject.toml).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test bench lint clean

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

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) build *.egg-info
