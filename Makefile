# GNU make. `make run` for the whole thing on this machine, `make test` for the suite on
# PostgreSQL + Redis (this machine's, or private ones from wheels: scripts/services.sh).

VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
STAMP := $(VENV)/.installed

# `eval` this in a recipe: DATABASE_URL and REDIS_URL for the suite and the bench
# (exported ones, else this machine's services, else private ones; see the script).
SERVICES := eval "$$(PYTHON=$(PY) scripts/services.sh)"

.PHONY: venv run reset test test-core bench lint typecheck check-deploy

venv: $(STAMP)

# Reinstall only when a pyproject.toml changed since the last install: the Agent SDK (sdk/,
# its own distribution) and the server, both editable.
$(STAMP): pyproject.toml sdk/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q -e './sdk[mcp,a2a]' -e '.[test]'
	@touch $@

# The databases (private ones unless DATABASE_URL / REDIS_URL are set), migrations, the
# demo, daphne, a Celery worker with beat and the demo agents; Ctrl-C stops them all.
run: venv
	@exec $(PY) -m mission_weave.stack run

# Delete .mw/ (databases, agent keys, cursors), after asking.
reset: venv
	@$(PY) -m mission_weave.stack reset

# The OpenID provider the sign-in browser test runs (tests/e2e/test_oidc_sign_in.py):
# oidc-provider from the npm registry at its package-lock.json's versions, into
# tests/e2e/oidc_provider/node_modules (never committed), again only when the lock changes.
# Without npm, or when npm ci fails, it says so and the suite runs: that test then fails,
# saying what to install.
OIDC_PROVIDER := tests/e2e/oidc_provider
OIDC_STAMP := $(OIDC_PROVIDER)/node_modules/.installed

.PHONY: oidc-provider
oidc-provider: $(OIDC_STAMP)

$(OIDC_STAMP): $(OIDC_PROVIDER)/package.json $(OIDC_PROVIDER)/package-lock.json
	@if ! command -v npm >/dev/null; then \
		echo "make: no npm, so the OIDC sign-in test will fail (apt-get install nodejs npm)" >&2; \
	elif npm ci --prefix $(OIDC_PROVIDER) --no-audit --no-fund --loglevel=error >/dev/null; then \
		touch $@; \
	else echo "make: npm ci in $(OIDC_PROVIDER) failed; the OIDC sign-in test will fail" >&2; fi

# Test workers (pytest-xdist), each with its own PostgreSQL and Redis databases; the
# slowest tests are listed at the end, to keep an eye on CI's 20 minutes.
MW_TEST_WORKERS ?= 2

test: venv $(OIDC_STAMP)
	@$(SERVICES) && $(PY) manage.py makemigrations --check --dry-run && \
		$(PY) -m pytest -n $(MW_TEST_WORKERS) --durations=15

# The fast lane: the pure core's tests (tests/unit) and the architecture rules, about 20 s.
test-core: venv
	@$(SERVICES) && $(PY) -m pytest tests/unit tests/test_architecture.py

# The fault tests (tests/faults/, left out of `make test`): workers, the web process, a
# private PostgreSQL and Redis and Celery workers killed or restarted under load, and the
# scale-out run. About 4 minutes on 2 cores; each test prints its figure, and the run
# ends with all of them.
.PHONY: test-faults
test-faults: venv
	@$(SERVICES) && MW_FAULT_TESTS=1 $(PY) -m pytest tests/faults

# The suites that talk to the database (tests/integration, the live SDK tests, the fault
# tests) against a Citus cluster: MW_CITUS_URL names a database on its coordinator that
# has the extension and its workers (docs/operations.md, "Past one database"). Each test
# database is distributed like a deployment's (tests/citus.py).
.PHONY: test-citus
test-citus: venv
	@test -n "$(MW_CITUS_URL)" || { echo "make test-citus: set MW_CITUS_URL=postgres://USER@COORDINATOR:PORT/DB" >&2; exit 1; }
	@export DATABASE_URL="$(MW_CITUS_URL)" && $(SERVICES) && \
		$(PY) -m pytest -n $(MW_TEST_WORKERS) tests/integration tests/sdk && \
		MW_FAULT_TESTS=1 $(PY) -m pytest tests/faults

# The full schemathesis run (tests/hostile/test_schemathesis.py; `make test` runs 300 cases
# of it): MW_HOSTILE_CASES generated requests, about 16 minutes for 50,000 on 2 cores. It
# prints the totals (cases, cases/s, failures by check) and the seed (MW_HOSTILE_SEED).
MW_HOSTILE_CASES ?= 50000
.PHONY: test-hostile
test-hostile: venv
	@$(SERVICES) && MW_HOSTILE_CASES=$(MW_HOSTILE_CASES) LOG_LEVEL=WARNING $(PY) -m pytest \
		tests/hostile/test_schemathesis.py

bench: venv
	@$(SERVICES) && $(PY) manage.py migrate --noinput && $(PY) manage.py mw_bench

lint: venv
	$(VENV)/bin/ruff check .

# Strict on what other code is written against (the pure core, the protocol, the SDK and
# its bridges), then the whole tree with mypy's defaults (Django and friends ship no types: Any).
typecheck: venv
	$(VENV)/bin/mypy --strict -p mission_weave.core -p mission_weave.protocol -p mission_weave.sdk \
		-p mission_weave.mcp_server -p mission_weave.a2a_bridge
	$(VENV)/bin/mypy apps mission_weave

# Throwaway secrets: only to run the checks, never used for anything else.
check-deploy: venv
	DJANGO_SETTINGS_MODULE=mission_weave.settings_production \
	SECRET_KEY="$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(50))')" \
	MW_AUTHORITY_KEY="$$($(PY) -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode())')" \
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/missionweave} \
	$(PY) manage.py check --deploy --fail-level WARNING
