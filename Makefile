# Two commands: `make up` (the platform on the embedded default) and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: up test test-fast lint bench chaos clean java venv jars

java:
	@command -v java >/dev/null 2>&1 || { echo "Java 17 is required for Kafka and Spark and was not found: install it (Debian/Ubuntu: apt-get install -y openjdk-17-jdk-headless)"; exit 1; }

# JVM dependencies (pom.xml): Apache Kafka's broker into .jars/kafka, Spark's Kafka connector into
# .jars/spark. Fetched once from Maven Central; later runs need no network.
JARS_STAMP := .jars/.fetched
$(JARS_STAMP): pom.xml
	@command -v mvn >/dev/null 2>&1 || { echo "Maven is required to fetch Kafka and Spark's Kafka connector (pom.xml) and was not found: install it (Debian/Ubuntu: apt-get install -y maven)"; exit 1; }
	@echo "fetching the JVM dependencies named in pom.xml into .jars/ (once) ..."
	@mvn -B -q -Dstyle.color=never -f pom.xml generate-resources || { echo "could not fetch the jars named in pom.xml (above: which artifact and why). Check the network to Maven Central (or your mirror in ~/.m2/settings.xml), then run \`make jars\` again."; exit 1; }
	@touch $(JARS_STAMP)

jars: $(JARS_STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@# The Spark provider pulls in pyspark-client, whose Python files overwrite pyspark's; when the
	@# two versions differ py4j fails (UserDefinedPythonFunction): put the pinned pyspark back.
	$(PY) -m pip install --quiet --no-deps --force-reinstall $$(grep -E '^pyspark==' requirements.txt | cut -d' ' -f1)
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)

up: java jars venv
	$(VENV)/bin/rewind up

# Lint and type check (pyproject.toml: [tool.ruff], [tool.mypy]); `make test` runs them first.
LINT_PATHS := rewind rewind_airflow tests bench dags spark_jobs plugins
lint: venv
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m mypy rewind rewind_airflow

# Two pytest-xdist workers, a module never split, the longest modules first (tests/conftest.py).
PYTEST_WORKERS ?= 2
XDIST = -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
# The lint runs beside the tests (its output after theirs, from build/lint.log): on 2 cores it overlaps the
# start of the suite (the class-data archive's job) instead of delaying it by half a minute. Either failing
# fails `make test`.
test: java jars venv
	@mkdir -p build; $(MAKE) --no-print-directory lint > build/lint.log 2>&1 & lint=$$!; \
	  echo "$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)"; \
	  $(PY) -m pytest $(XDIST) $(PYTEST_ARGS); tests=$$?; \
	  wait $$lint; linted=$$?; cat build/lint.log; \
	  [ $$linted -eq 0 ] || echo "make test: the lint failed (above): make lint"; \
	  [ $$tests -eq 0 ] && [ $$linted -eq 0 ]

test-fast: java jars venv lint
	$(PY) -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

# Each bench prints one JSON object: saved to bench/results/NAME.json (via .tmp, so a failed run
# leaves the previous result), then the charts go to docs/img/. See docs/benchmarks.md.
BENCHES := savepoint checkpoint_inspect recovery standby throughput replay latency proof_scaling sinks driver_memory \
           overhead overhead_inventory overhead_latency realtime
# A result whose name is not its script's: the script and its arguments.
SCRIPT_overhead_inventory := overhead
ARGS_overhead_inventory := --transform inventory
SCRIPT_overhead_latency := overhead
ARGS_overhead_latency := --latency --repeat 3
bench: java jars venv
	@mkdir -p bench/results docs/img
	@set -e; $(foreach b,$(BENCHES),\
	  echo "bench: $(b) ($$(date -u +%H:%M:%S) UTC)" >&2; \
	  $(PY) bench/$(or $(SCRIPT_$(b)),$(b)).py $(ARGS_$(b)) > bench/results/$(b).json.tmp; \
	  mv bench/results/$(b).json.tmp bench/results/$(b).json;)
	$(PY) bench/charts.py bench/results docs/img

chaos: java jars venv
	$(VENV)/bin/rewind chaos demo --seed 7 --events 1000000 --kills 25 --broker-restarts 3 --corruptions 4 --replays 3 --s3-outages 3 --skewed-restarts 3

clean:
	rm -rf .rewind .pytest_cache
