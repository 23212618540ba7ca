# ldpmarket: two commands for a new user, `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt | cksum | cut -d' ' -f1)

.PHONY: venv test bench clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-dev.txt
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

## make test: the whole suite (set DATABASE_URL / REDIS_URL to run it on PostgreSQL and Redis)
test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

## make bench: every benchmark in benchmarks/, figures to benchmarks/results/
bench: venv
	$(PY) -m pip install --quiet -r requirements-bench.txt
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
