#!/usr/bin/env bash
# Serve MissionWeave with daphne on 127.0.0.1:${PORT:-8000}. With REDIS_URL set, a Celery
# worker (with beat) runs beside it and is stopped when this script exits.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
if [ -d "$VENV/bin" ]; then
    PATH="$PWD/$VENV/bin:$PATH"
fi
PORT="${PORT:-8000}"

echo "MissionWeave: http://127.0.0.1:$PORT/  (admin: http://127.0.0.1:$PORT/admin/)"
echo "Demo login: owner / owner"

# The demo's coordinator and two workers (mission_weave.sdk.demo_agents) wait until the
# server answers, then move the demo Mission along; they stop with the server.
# MW_DEMO_AGENTS=0 leaves them out.
agents_pid=""
start_demo_agents() {
    if [ "${MW_DEMO_AGENTS:-1}" != "0" ]; then
        python -m mission_weave.sdk.demo_agents --url "http://127.0.0.1:$PORT" \
            --keys "${MW_DATA_DIR:-.mw}/agents" &
        agents_pid=$!
    fi
}

if [ -z "${REDIS_URL:-}" ]; then
    if [ "${MW_DEMO_AGENTS:-1}" = "0" ]; then
        exec daphne -b 127.0.0.1 -p "$PORT" mission_weave.asgi:application
    fi
    daphne -b 127.0.0.1 -p "$PORT" mission_weave.asgi:application &
    daphne_pid=$!
    start_demo_agents
    stop_embedded() {
        kill $agents_pid "$daphne_pid" 2>/dev/null || true
        wait $agents_pid "$daphne_pid" 2>/dev/null || true
    }
    trap stop_embedded EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    wait "$daphne_pid"
    exit $?
fi

# Both run in the background so that a signal to this script is handled at once (bash
# defers traps while a foreground child runs); the EXIT trap stops whichever is left.
# Beat's schedule file lives with the other local data, not in the working tree.
mkdir -p "${MW_DATA_DIR:-.mw}"
celery -A mission_weave.celery worker --beat -l info \
    --schedule "${MW_DATA_DIR:-.mw}/celerybeat-schedule" &
celery_pid=$!
# Several daphne processes share one socket: HTTP throughput grows with processes.
python -m mission_weave.serve --workers "${MW_WEB_WORKERS:-2}" --port "$PORT" &
daphne_pid=$!
start_demo_agents
stop_children() {
    kill $agents_pid "$daphne_pid" "$celery_pid" 2>/dev/null || true
    wait $agents_pid "$daphne_pid" "$celery_pid" 2>/dev/null || true
}
trap stop_children EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Exit (and stop the worker) as soon as either process ends.
wait -n "$daphne_pid" "$celery_pid"
