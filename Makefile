# GNU make. `make run` for the embedded try-out, `make test` for the suite on
# PostgreSQL + Redis (started by scripts/services.sh when local).

VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
STAMP := $(VENV)/.installed

# Defaults for the real services; override by exporting DATABASE_URL / REDIS_URL.
SERVICES_ENV := DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/missionweave} \
	REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0}

.PHONY: venv run test bench lint check-deploy

venv: $(STAMP)

# Reinstall only when pyproject.toml changed since the last install.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q -e '.[test]'
	@touch $@

run: venv
	$(PY) manage.py migrate --noinput
	$(PY) manage.py mw_demo
	exec scripts/run.sh

test: venv
	scripts/services.sh
	$(SERVICES_ENV) $(PY) manage.py makemigrations --check --dry-run
	$(SERVICES_ENV) $(PY) -m pytest

bench: venv
	scripts/services.sh
	$(SERVICES_ENV) $(PY) manage.py migrate --noinput
	$(SERVICES_ENV) $(PY) manage.py mw_bench

lint: venv
	$(VENV)/bin/ruff check .

# Throwaway secrets: only to run the checks, never used for anything else.
check-deploy: venv
	DJANGO_SETTINGS_MODULE=mission_weave.settings_production \
	SECRET_KEY="$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(50))')" \
	MW_AUTHORITY_KEY="$$($(PY) -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode())')" \
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/missionweave} \
	$(PY) manage.py check --deploy --fail-level WARNING
