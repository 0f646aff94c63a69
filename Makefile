# Everyday commands. `make test` from a fresh clone needs only python3.11+, pip and make:
# `install` builds .venv and the suite starts its own Kafka-compatible broker.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Written after a successful install; rebuilt when the dependencies in pyproject.toml change.
STAMP := $(VENV)/.installed
IMAGE ?= worker
PYTEST_ARGS ?=
# xdist workers for `make test`, each with its own broker. The integration tests mostly
# wait on the test broker's group joins, so more workers than cores pays (measured in
# README.md, "Tests"); `make test TEST_WORKERS=0` runs the suite in one process.
TEST_WORKERS ?= 6
UNIT_WORKERS ?= 2
# e.g. make demo DEMO_ARGS='--duration 20 --rate 1000'
DEMO_ARGS ?=
# make demo DEMO_BROKER=kafka: the same demo on Apache Kafka (default: the embedded broker)
DEMO_BROKER ?= embedded

.DEFAULT_GOAL := help
.PHONY: help install kafka test test-cluster test-unit demo bench lint docker constraints clean

help:
	@echo "make install    create $(VENV) and install worker with its dev extra"
	@echo "make kafka      fetch the pinned Apache Kafka broker's jars once (Maven Central; needs java, mvn)"
	@echo "make test       the whole suite: unit, property, integration, faults, on the embedded broker"
	@echo "                and on Apache Kafka (~20 min, $(TEST_WORKERS) in parallel; WORKER_TEST_BROKER=kafka: all on Kafka)"
	@echo "make test-cluster  a Kafka broker of a 3-node cluster killed under exactly-once (~2.5 min)"
	@echo "make test-unit  the fast subset (no broker, < 1 min)"
	@echo "make demo       local broker + sample data + two workers for about a minute"
	@echo "                (DEMO_BROKER=kafka: on Apache Kafka)"
	@echo "make bench      run the benchmarks"
	@echo "make lint       ruff check, ruff format --check, mypy"
	@echo "make docker     build the $(IMAGE) image (dependencies pinned by constraints.txt)"
	@echo "make constraints  pin constraints.txt to the versions in $(VENV) (after a green make test)"
	@echo "make clean      remove $(VENV) and caches"

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "worker needs Python >= 3.11; $(PYTHON) is " + sys.version.split()[0] + " (try: make PYTHON=python3.11 ...)")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { \
		echo "could not create $(VENV) with '$(PYTHON) -m venv' (on Debian/Ubuntu: apt-get install python3-venv)" >&2; \
		rm -rf $(VENV); exit 1; }
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	@touch $(STAMP)

# The pinned Apache Kafka (worker/dev/kafka-broker/pom.xml) into .cache/kafka/ (or
# $$WORKER_KAFKA_CACHE): fetched once with a completion stamp, offline afterwards.
kafka: install
	$(BIN)/python -m worker.dev.kafka_install

# loadgroup (tests/support/scheduling.py supplies it): a test at a time to whichever xdist
# worker has room, the longest first (--no-loadscope-reorder keeps that order), a module
# that must stay together whole on one worker.
test: install kafka
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m 'not cluster' $(PYTEST_ARGS) tests

# Three Kafka JVMs and two workers take both cores for ~2 minutes: alone, after `make test`
# (.ci/run), so that they never share the machine with the suite's own brokers.
test-cluster: install kafka
	$(BIN)/python -m pytest -q -m cluster $(PYTEST_ARGS) tests/faults

# CPU-bound: one xdist worker per core (2 here) took it from ~50 s to ~34 s.
test-unit: install
	$(BIN)/python -m pytest -q -n $(UNIT_WORKERS) -m 'not integration and not faults' $(PYTEST_ARGS) tests/unit tests/property

demo: install
	$(if $(filter kafka,$(DEMO_BROKER)),@$(MAKE) --no-print-directory kafka)
	$(BIN)/worker dev demo $(if $(filter kafka,$(DEMO_BROKER)),--kafka) $(DEMO_ARGS)

bench:
	@test -d benchmarks || { echo "no benchmarks/ directory in this checkout: nothing to run" >&2; exit 1; }
	@$(MAKE) --no-print-directory install
	$(BIN)/python -m benchmarks

lint: install
	$(BIN)/ruff check worker tests benchmarks
	$(BIN)/ruff format --check worker tests benchmarks
	$(BIN)/mypy worker benchmarks

docker:
	docker build -t $(IMAGE) .

# The Dockerfile installs with these pins; the comment lines at the top are kept.
constraints: install
	@{ grep '^#' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable; } > constraints.txt.tmp
	@mv constraints.txt.tmp constraints.txt
	@echo "constraints.txt: $$(grep -vc '^#' constraints.txt) packages pinned"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis .demo
	@echo "(the Apache Kafka jars in .cache/kafka stay; rm -rf .cache to fetch them again)"
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
