# `make demo` sets everything up and runs the pipeline on the embedded defaults;
# `make test` runs the test suite (what .ci/run calls).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
ENV := source scripts/env.sh &&

.PHONY: help install class-archive system-packages demo test test-fast lint docs bench bench-scale capacity replay airflow ui-screenshot health-screenshot health-screenshot-stack backfill-90 backfill-retrain compose-up compose-down compose-smoke clean
help:
	@echo "make demo       install, land the example data, train and score through Airflow, print a summary"
	@echo "                (PIPELINE=bikeshare: the second example, or any pipeline folder: scripts/demo.sh)"
	@echo "make test       run the whole test suite"
	@echo "make test-fast  the suite without the end-to-end runs and the slow whole-job tests (about 7 minutes):"
	@echo "                the loop while developing"
	@echo "make class-archive  Spark's JVM classes in one file that every spark-submit maps (make test and"
	@echo "                make airflow build it): jobs start on less CPU"
	@echo "make lint       ruff"
	@echo "make docs       the docs site from docs/ into site/ (mkdocs --strict: a broken link fails it)"
	@echo "make bench      every benchmark: results table and plots in benchmarks/results/ (make bench SMOKE=1:"
	@echo "                tiny sizes, a minute or two)"
	@echo "make bench-scale  training at 1x and 10x the year (SCALES=1,10,100 CONTENDERS=peer,1,2 CLUSTER_SCALE=1):"
	@echo "                rows/s and peak memory per rank against a DataLoader peer (docs/bench/scale.md)"
	@echo "make capacity   the capacity model from docs/bench/scale/scale.json (docs/bench/capacity.md)"
	@echo "make replay     2013 served day by day under each retraining policy (POLICY=weekly for one; START=,"
	@echo "                END=, REPLAY_ARGS=...): report and plot in .pipeline/replay/report/ (docs/replay.md)"
	@echo "make airflow    the deployed stack until Ctrl-C: Airflow (UI on :8080) and MLflow (UI on :5000) on"
	@echo "                PostgreSQL; make airflow SPARK=1 adds a Spark standalone cluster for the tasks,"
	@echo "                CONNECT=1 a shared Spark Connect server for the nightly jobs"
	@echo "make ui-screenshot  run tests/deployed/test_stack.py and copy its Airflow UI screenshot to docs/airflow-ui.png"
	@echo "make health-screenshot  the Model health page of a synthetic 60-day lake in headless Chromium: docs/model-health.png"
	@echo "make health-screenshot-stack  run tests/deployed/test_backfill.py and copy its Model health screenshot to docs/model-health-stack.png"
	@echo "make backfill-90  90 days of ingest and scoring backfilled on the deployed stack through the REST API,"
	@echo "                the API's health check timed all along (half an hour or more): tests/load/"
	@echo "make backfill-retrain  60 days backfilled with a decay or drift every 14 days: each retraining once,"
	@echo "                each champion serving from its day (40 min or more): tests/load/"
	@echo "make compose-up   the docker-compose stack: the engine (installed and started if need be, as root), base"
	@echo "                images without a registry, the image, up --wait (docs/deployment.md); compose-down stops it"
	@echo "make compose-smoke  by hand: the compose stack from nothing through a training, a night, a night of both"
	@echo "                pipelines at once over the REST API, down and up (pytest -m compose; FAULTS=1 adds the container"
	@echo "                faults, NIGHTS=1 times a night of each alone and both at once; SHOTS=docs refreshes the docs'"
	@echo "                screenshots)"
	@echo "make clean      remove .pipeline/ (lake, MLflow store, Airflow DB)"

# A pipeline's packages.txt: what its landing needs beyond the project's dependencies, installed
# without their own (pipelines/bikeshare/packages.txt: ISLP, whose CSV file the landing reads; its
# dependencies are a deep-learning stack of their own).
PIPELINE_PACKAGES := $(wildcard pipelines/*/packages.txt)
$(STAMP): pyproject.toml $(PIPELINE_PACKAGES)
	@echo "==> installing into $(VENV) (log: $(VENV)/install.log)"
	$(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/pip install --upgrade pip > $(VENV)/install.log 2>&1 \
	  && $(VENV)/bin/pip install -e '.[dev]' >> $(VENV)/install.log 2>&1 \
	  $(if $(PIPELINE_PACKAGES),&& $(VENV)/bin/pip install --no-deps $(addprefix -r ,$(PIPELINE_PACKAGES)) \
	     >> $(VENV)/install.log 2>&1) \
	  || { tail -n 40 $(VENV)/install.log; exit 1; }
	@touch $@

install: $(STAMP)
	@git rev-parse --is-inside-work-tree >/dev/null 2>&1 && git config core.hooksPath scripts/hooks || true

# Spark's JVM classes, parsed and verified once (jobs/runtime/class_archive.py): every spark-submit of
# this environment then starts on about a third less CPU (scripts/env.sh points SPARK_SUBMIT_OPTS
# at it). About a minute; rebuilt with the environment. The demo goes without (its few jobs would
# not win back the minute).
ARCHIVE := $(VENV)/spark-classes.jsa
$(ARCHIVE): $(STAMP)
	@echo "==> Spark's class archive: $@"
	@$(ENV) $(VENV)/bin/python -m jobs.runtime.class_archive --out $@

class-archive: $(ARCHIVE)

# PostgreSQL, Chromium and chromedriver from Debian: the deployed-stack and browser tests and
# `make airflow` need them. Run every time: it only asks apt for what is missing.
system-packages:
	@bash scripts/system_packages.sh

PIPELINE ?= flights
demo: install
	$(ENV) PIPELINE=$(PIPELINE) bash scripts/demo.sh

# Two pytest-xdist workers: the suite waits on processes (JVMs, Airflow, the stack) as much as it
# computes, so two workers share this 2-core machine's time; a module stays on one worker, and
# tests/deployed/ (one stack, the longest) too (tests/conftest.py). Modules go out in the order of
# tests/conftest.py (the longest first, then collection order), not xdist's (the most tests first).
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
PYTEST := $(VENV)/bin/pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --no-loadscope-reorder)

test: install class-archive system-packages
	$(PYTEST)

test-fast: install class-archive
	$(PYTEST) -m "not e2e and not slow"

lint: install
	$(VENV)/bin/ruff check .

# The reference lives in docs/ (mkdocs.yml); --strict fails on a broken link or anchor, or a page outside the nav.
docs: install
	$(VENV)/bin/mkdocs build --strict -d site

# Resumable: run it again with the same settings and it goes on from the last finished day.
# The defaults: the bar closed (every baseline of the config) and the config's sweep, both families
REPLAY_ARGS ?=
replay: install class-archive
	$(ENV) python -m orchestration.replay $(if $(POLICY),--policy $(POLICY)) $(if $(START),--start $(START)) \
	  $(if $(END),--end $(END)) $(REPLAY_ARGS)

# The full run takes an hour or more on 2 cores; SMOKE=1 checks that every stage runs (the suite does too).
BENCH_OUT ?= benchmarks/results
bench: install class-archive
	$(ENV) $(VENV)/bin/python -m benchmarks.bench --out $(BENCH_OUT) $(if $(SMOKE),--smoke)

# By hand: the scale benchmark (benchmarks/training_scale.py). The default, 1x and 10x the year with the peer, 1 and 2
# ranks and the cluster point at 1x, takes about an hour on 2 loaded cores; the 100x row (34M rows, one
# epoch, 2 ranks) is its own run: make bench-scale SCALES=100 CONTENDERS=2 CLUSTER_SCALE=0 (hours;
# SCALE_DATA keeps the features and their scaled copies, about 1 GB with 100x, for the next run).
SCALES ?= 1,10
CONTENDERS ?= peer,1,2
CLUSTER_SCALE ?= 1
SCALE_DATA ?= $(CURDIR)/.pipeline/bench-scale
bench-scale: install
	$(ENV) $(VENV)/bin/python -m benchmarks.training_scale --out $(BENCH_OUT) --scales $(SCALES) \
	  --contenders $(CONTENDERS) --cluster-scale $(CLUSTER_SCALE) --data $(SCALE_DATA)

capacity: install
	$(ENV) $(VENV)/bin/python -m studies.capacity --out $(BENCH_OUT)

airflow: install class-archive system-packages
	$(ENV) bash scripts/stack.sh $(if $(SPARK),--spark) $(if $(CONNECT),--connect)

# By hand, not in CI: the README's picture of the UI, from a fresh run of the stack test.
UI_TEST_HOME := $(CURDIR)/.pipeline/ui-screenshot
ui-screenshot: install system-packages
	rm -rf $(UI_TEST_HOME)
	PIPELINE_TEST_HOME=$(UI_TEST_HOME) $(VENV)/bin/pytest -q -p no:logging tests/deployed/test_stack.py
	mkdir -p docs && cp $(UI_TEST_HOME)/screenshots/*-promote_candidate.png docs/airflow-ui.png

# By hand: the docs' picture of the Model health page (a synthetic lake; a few seconds).
health-screenshot: install system-packages
	$(ENV) $(VENV)/bin/python scripts/health_screenshot.py --out docs/model-health.png

# By hand: the page on the deployed stack after the backfill's decay and drift (about 15 minutes).
HEALTH_TEST_HOME := $(CURDIR)/.pipeline/health-screenshot
health-screenshot-stack: install system-packages
	rm -rf $(HEALTH_TEST_HOME)
	PIPELINE_TEST_HOME=$(HEALTH_TEST_HOME) $(VENV)/bin/pytest -q -p no:logging tests/deployed/test_backfill.py
	mkdir -p docs && cp $(HEALTH_TEST_HOME)/screenshots/backfill-*-model-health.png docs/model-health-stack.png

# By hand, not in CI: 90 days of ingest and scoring backfilled on the deployed stack through the REST
# API (tests/load/; half an hour or more on 2 cores): its figures and plot go to $(BACKFILL_TEST_HOME).
BACKFILL_TEST_HOME := $(CURDIR)/.pipeline/backfill-90
BACKFILL_DAYS ?= 90
backfill-90: install class-archive system-packages
	rm -rf $(BACKFILL_TEST_HOME)
	PIPELINE_TEST_HOME=$(BACKFILL_TEST_HOME) $(VENV)/bin/pytest -q -s -p no:logging tests/load \
	  --backfill-days $(BACKFILL_DAYS)

# By hand, not in CI: the same backfill with a retraining trigger every RETRAIN_EVERY days (decay, then
# drift, in turns) over RETRAIN_DAYS days (tests/load/; an hour on 2 cores): figures to its test home.
RETRAIN_TEST_HOME := $(CURDIR)/.pipeline/backfill-retrain
RETRAIN_DAYS ?= 60
RETRAIN_EVERY ?= 14
backfill-retrain: install class-archive system-packages
	rm -rf $(RETRAIN_TEST_HOME)
	PIPELINE_TEST_HOME=$(RETRAIN_TEST_HOME) $(VENV)/bin/pytest -q -s -p no:logging tests/load \
	  --backfill-days $(RETRAIN_DAYS) --retrain-every $(RETRAIN_EVERY)

# The docker-compose stack (scripts/compose_stack.py): its volumes outlive compose-down.
# No .env: it asks to write one with fresh random secrets (WRITE_ENV=1: without asking).
compose-up: install
	$(VENV)/bin/python scripts/compose_stack.py up $(if $(WRITE_ENV),--write-env)

compose-down:
	$(VENV)/bin/python scripts/compose_stack.py down

# By hand, not in CI: the compose stack from nothing, end to end (tests/deployed/test_compose_smoke.py, the
# `compose` marker: the suite skips it; its own compose project, so the volumes of compose-up's stack are
# left alone; it stops what compose-up runs first, for the ports). FAULTS=1 adds the container faults
# (or FAULTS=scheduler,postgres,worker,connect, some of them), NIGHTS=1 times a night of each pipeline alone and
# both at once. Its steps and times: .pipeline/compose/smoke.json.
compose-smoke: install system-packages
	-$(VENV)/bin/python scripts/compose_stack.py down
	$(VENV)/bin/pytest -m compose -s -p no:logging tests/deployed/test_compose_smoke.py \
	  $(if $(FAULTS),--compose-faults $(if $(filter 1,$(FAULTS)),all,$(FAULTS))) $(if $(NIGHTS),--compose-nights) \
	  $(if $(WRITE_ENV),--compose-write-env) $(if $(SHOTS),--compose-shots $(SHOTS))

clean:
	rm -rf .pipeline
