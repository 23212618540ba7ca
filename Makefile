# ldpmarket: two commands for a new user, `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The stamp changes with the requirements and the client's pyproject.toml: any of them changed -> reinstall.
STAMP  := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt client/pyproject.toml | cksum | cut -d' ' -f1)

# make run: the embedded set-up (SQLite file db.sqlite3, Celery tasks in-process). Shell variables that would
# point it elsewhere are dropped: the service it starts runs no Celery worker. For PostgreSQL, Redis, workers
# and beat use docker-compose.yml.
RUN_ADDR ?= 127.0.0.1:8000
RUN_ENV  := env -u DATABASE_URL -u REDIS_URL -u CELERY_BROKER_URL -u CELERY_RESULT_BACKEND -u CELERY_TASK_ALWAYS_EAGER

.PHONY: venv run test bench clean

# The venv also holds the Python client and its CLI (client/, docs/client.md), editable, with its extras
# (pandas and tqdm: its tests use them).
$(STAMP): requirements.txt requirements-dev.txt client/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install --quiet -e './client[all]'
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

## make run: venv, .env with fresh keys (first time only), migrate, static files, demo data, then the server
run: venv .env
	@echo "==> migrating the database (db.sqlite3)"
	@$(RUN_ENV) $(PY) manage.py migrate --noinput -v0
	@$(RUN_ENV) $(PY) manage.py collectstatic --noinput -v0
	@echo "==> loading the demo data (idempotent)"
	@$(RUN_ENV) $(PY) manage.py load_demo --base-url http://$(RUN_ADDR)
	@echo
	@echo "==> starting http://$(RUN_ADDR)/ (Ctrl-C stops it)"
	@$(RUN_ENV) $(PY) manage.py runserver $(RUN_ADDR)

# Written once, never overwritten: LDP_VALUE_KEY decrypts the stored values and LDP_PSEUDONYM_KEY fixes the
# buyers' pseudonyms, so replacing them would make the existing database unreadable.
.env:
	@umask 077 && set -C && $(PYTHON) -c 'import secrets; t = secrets.token_urlsafe; print("\n".join([ \
	  "# Written by make run: keep it secret and never change the keys (they decrypt the stored values).", \
	  "DJANGO_DEBUG=1", "DJANGO_SECRET_KEY=" + t(50), "LDP_VALUE_KEY=" + t(32), "LDP_PSEUDONYM_KEY=" + t(32)]))' > $@
	@echo "==> wrote $@ with fresh keys"

## make test: the layers (lint-imports, .importlinter), ruff, the browser JavaScript's unit tests (node --test), the
## alert rules' tests (promtool), then the whole suite in parallel (set DATABASE_URL / REDIS_URL to run it on
## PostgreSQL and Redis)
PYTEST_WORKERS ?= auto
test: venv
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check .
	@if command -v node >/dev/null 2>&1; then node --test tests/js/; \
	  else echo "==> node not found: the JavaScript unit tests (tests/js/) were NOT run (install Node 20)"; fi
	@if command -v promtool >/dev/null 2>&1; then promtool check rules deploy/prometheus/rules.yml \
	  && promtool check config --syntax-only deploy/prometheus/prometheus.yml \
	  && promtool test rules deploy/prometheus/rules_test.yml; \
	  else echo "==> promtool not found: the alert rules (deploy/prometheus/) were NOT checked or tested" \
	  "(apt-get install --no-install-recommends prometheus)"; fi
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

## make bench: every benchmark in benchmarks/, figures to benchmarks/results/
bench: venv
	$(PY) -m pip install --quiet -r requirements-bench.txt
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
