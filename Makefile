# Every target installs what it needs first; `make install` is idempotent (a stamp tracks pyproject.toml).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test bench bench-pipeline demo-pipeline lint clean

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

# The pipeline's own bench (Spark, ~an hour on 2 cores): report and whatif on 30 days x 500 entities.
bench-pipeline: install
	$(PY) tests/bench/bench_pipeline.py --out docs/benchmarks-pipeline.md

# The pipeline on the demo's records: report + whatif, one HTML page (docs/pipeline.md).
demo-pipeline: install
	$(PY) -m sluice.proxy pipeline demo --out demo-pipeline

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) build *.egg-info
