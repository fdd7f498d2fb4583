# Every target installs what it needs first; `make install` is idempotent (a stamp tracks pyproject.toml).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast soak bench bench-quick bench-pipeline demo-pipeline lint typecheck clean

install: $(STAMP)

# PYTHONWARNINGS: setuptools prints a notice (information, not a warning about this project) on every
# editable install, and calls pyproject's ext-modules table experimental on every build.
# The compiled walks (protocol/_compiled.c), rate (quota/_compiled.c), filter runs, pipeline runs, connection
# queries and passes (proxy/data_path/_*.c), usage recording, client quotas and address rewrite
# (proxy/filters/_*.c, with proxy/_compiled.h) are built by the editable install: a change to them installs
# again.
$(STAMP): pyproject.toml protocol/_compiled.c quota/_compiled.c $(wildcard proxy/*/_*.c) proxy/_compiled.h
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The distribution was once named `sluice` (another project's name on PyPI): drop that older install
	# first, since uninstalling it removes the `sluice` script both install.
	$(PY) -m pip uninstall --quiet --yes sluice 2>/dev/null || true
	PYTHONWARNINGS="ignore:Editable installation,ignore:\`[tool.setuptools.ext-modules]\`" $(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: install
	$(PY) -m sluice.proxy demo

# Every test, on six workers (on two cores: the end-to-end tests mostly wait on throttles, and four workers
# left the CPU half idle: 7.5 CPU-minutes in 8 min 12 s of wall time, where six took 7 min 0 s); the tests of
# one xdist group run on one worker, one at a time (Spark; each fleet sensor), and the slow tests start
# first (tests/conftest.py). The ten slowest are listed before pytest's summary line, the last line
# printed; each says in its docstring why it takes what it takes.
test: install
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n 6 --dist loadgroup --durations=10

# The unit and property tests: everything not marked `slow` (the end-to-end tests that start the test
# broker, the proxy or client processes), on two workers. Under a minute.
test-fast: install
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -m "not slow" -n 2 --durations=10

# Hostile clients and a flood while 200,000 records go through (a few minutes; not part of `make test`).
soak: install
	$(PY) -m pytest -q -s -m soak tests/test_soak.py

bench: install
	$(PY) tests/bench/run_all.py --out docs/benchmarks.md

# The hot path's figures (sections 2, 3, 9, 10 of bench) in under two minutes, not run by CI: exit 3 when
# one misses its target.
bench-quick: install
	$(PY) tests/bench/run_all.py --quick

# The pipeline's own bench (Spark, about 45 min on 2 cores): report and whatif on 30 days x 500 entities.
bench-pipeline: install
	$(PY) tests/bench/bench_pipeline.py --out docs/benchmarks-pipeline.md

# The pipeline on the demo's own usage records: `sluice demo` (30 s) saves what its main Sluice published,
# then report + whatif on them, one HTML page (docs/pipeline.md). `sluice pipeline demo` without --input
# uses a synthetic week instead.
demo-pipeline: install
	$(PY) -m sluice.proxy demo --seconds 30 --usage-out demo-pipeline/usage.jsonl
	$(PY) -m sluice.proxy pipeline demo --input demo-pipeline/usage.jsonl --out demo-pipeline

# ruff's rules and format, then the type checker.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) .ci/typecheck.py

# mypy on every module of the package `sluice`, with pyproject's [tool.mypy] (zero errors expected).
typecheck: install
	$(PY) .ci/typecheck.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache
