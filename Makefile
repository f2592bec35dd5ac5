# `make demo` sets everything up and runs the pipeline on the embedded defaults;
# `make test` runs the test suite (what .ci/run calls).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
ENV := source scripts/env.sh &&

.PHONY: help install demo test test-fast lint airflow clean
help:
	@echo "make demo       install, land the example data, train and score through Airflow, print a summary"
	@echo "make test       run the whole test suite"
	@echo "make test-fast  the suite without the end-to-end runs (about 5 minutes): the loop while developing"
	@echo "make lint       ruff"
	@echo "make airflow    the Airflow UI and scheduler (airflow standalone) on the same settings"
	@echo "make clean      remove .pipeline/ (lake, MLflow store, Airflow DB)"

$(STAMP): pyproject.toml
	@echo "==> installing into $(VENV) (log: $(VENV)/install.log)"
	$(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/pip install --upgrade pip > $(VENV)/install.log 2>&1 \
	  && $(VENV)/bin/pip install -e '.[dev]' >> $(VENV)/install.log 2>&1 \
	  || { tail -n 40 $(VENV)/install.log; exit 1; }
	@touch $@

install: $(STAMP)

demo: install
	$(ENV) bash scripts/demo.sh

test: install
	$(VENV)/bin/pytest

test-fast: install
	$(VENV)/bin/pytest -m "not e2e"

lint: install
	$(VENV)/bin/ruff check .

airflow: install
	$(ENV) airflow standalone

clean:
	rm -rf .pipeline
