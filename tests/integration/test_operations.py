"""GET /healthz, /readyz and /metrics, and the request and command log lines
(apps/operations), through Django's whole HTTP stack on the test database and Redis.

Counters are summed over every process writing to this host's metrics folder, other
test runs included, so exact amounts are checked on this process's own values and the
scrape is checked to carry them; tests/integration/test_operations_live.py checks the
sums across server processes exactly."""

import asyncio
import io
import json
import logging
import time

import pytest
import redis
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client, RequestFactory
from prometheus_client.parser import text_string_to_metric_families

from apps.delivery.consumer import Subscription
from apps.delivery.origin import AgentFriendlyOriginValidator
from apps.identity import registry
from apps.ledger import ports, publish
from apps.notify import tasks as notify_tasks
from apps.operations import metrics, observer, readiness
from apps.operations.collectors import REDIS_TIMEOUT
from apps.operations.logs import JsonFormatter, RequestIdFilter
from mission_weave.routing import websocket_urlpatterns
from tests.integration.artifact_helpers import submitted_json
from tests.integration.wslive import in_thread
from tests.support import Scenario, later

CLOSED_PORT = "redis://127.0.0.1:1/1"  # nothing listens there: connection refused
UNROUTABLE = "redis://192.0.2.1:6379/1"  # TEST-NET-1: packets go nowhere
# Redis down is told within its client timeout (0.25 s), not the operating system's (minutes
# for an unroutable address); four times it leaves room for a busy machine.
WITHIN_REDIS_TIMEOUT = 4 * REDIS_TIMEOUT


def scrape(client: Client | None = None, **headers) -> dict:
    """{(sample name, frozenset of labels): value} of GET /metrics, which must answer 200."""
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.content.decode())
            for sample in family.samples}


def own(metric, sample: str, **labels) -> float:
    """This process's value of one sample of `metric`."""
    for family in metric.collect():
        for found in family.samples:
            if found.name == sample and found.labels == labels:
                return found.value
    return 0.0


def commands(type_: str, code: str) -> float:
    return own(metrics.COMMANDS, "mw_commands_total", type=type_, code=code)


def series(type_: str, code: str) -> tuple:
    return ("mw_commands_total", frozenset({"type": type_, "code": code}.items()))


# -- /healthz ----------------------------------------------------------------------------

def test_healthz_answers_without_the_database_and_to_a_probe_on_the_pod_address(settings):
    # No database fixture: any query would fail this test.
    settings.SECURE_SSL_REDIRECT = True
    probe = {"HTTP_HOST": "10.1.2.3:8000"}  # the pod's address, not in ALLOWED_HOSTS
    response = Client().get("/healthz", **probe)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    # The same request to any other page is refused by the host check.
    assert Client().get("/login/", **probe).status_code == 400
    assert Client().post("/healthz").status_code == 405


# -- /readyz -----------------------------------------------------------------------------

def test_readyz_is_ready_when_postgres_redis_and_the_migrations_are(db, monkeypatch):
    monkeypatch.setattr(readiness, "_migrated", False)
    response = Client().get("/readyz", HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {
        "postgres": "ok", "redis": "ok", "migrations": "ok"}}
    assert readiness._migrated  # remembered: later probes skip the migration plan


@pytest.mark.parametrize("url", [CLOSED_PORT, UNROUTABLE])
def test_readyz_names_redis_when_it_is_down_and_answers_within_its_timeout(db, settings, url):
    settings.REDIS_URL = url
    started = time.perf_counter()
    response = Client().get("/readyz")
    elapsed = time.perf_counter() - started
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["postgres"] == "ok" and body["checks"]["migrations"] == "ok"
    assert body["checks"]["redis"].startswith(("ConnectionError", "TimeoutError"))
    if url == CLOSED_PORT:
        assert "refused" in body["checks"]["redis"].lower()
    assert elapsed < WITHIN_REDIS_TIMEOUT, elapsed
    # A client /metrics would not serve (the kubelet, anyone) is told which part, not why.
    outside = Client().get("/readyz", REMOTE_ADDR="203.0.113.9")
    assert outside.status_code == 503
    assert outside.json()["checks"] == {"postgres": "ok", "redis": "failed",
                                        "migrations": "ok"}


def test_readyz_names_a_migration_that_is_not_applied(db, monkeypatch):
    monkeypatch.setattr(readiness, "_migrated", False)
    recorder = MigrationRecorder(connection)
    latest = max(name for app, name in recorder.applied_migrations() if app == "delivery")
    recorder.record_unapplied("delivery", latest)  # the executor's plan now includes it

    response = Client().get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["postgres"] == "ok"
    assert checks["migrations"] == f"1 not applied: delivery.{latest}"
    assert not readiness._migrated

    recorder.record_applied("delivery", latest)
    assert Client().get("/readyz").status_code == 200


# -- /metrics: who may read it -------------------------------------------------------------

def test_metrics_are_refused_outside_the_allowed_networks_without_the_token(db, settings):
    settings.MW_METRICS_TOKEN = "scrape-token-4f9a"
    outside = {"REMOTE_ADDR": "203.0.113.9"}
    for headers in ({**outside}, {**outside, "HTTP_AUTHORIZATION": "Bearer wrong"},
                    {**outside, "HTTP_AUTHORIZATION": "scrape-token-4f9a"},
                    # Through a proxy the address is the client's word: the token only.
                    {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "127.0.0.1"}):
        refused = Client().get("/metrics", **headers)
        assert refused.status_code == 403, headers
        assert refused["Content-Type"].startswith("text/plain")
        assert b"mw_" not in refused.content

    assert scrape(**outside, HTTP_AUTHORIZATION="Bearer scrape-token-4f9a")
    assert scrape(REMOTE_ADDR="127.0.0.1")  # the default networks: loopback
    assert scrape(REMOTE_ADDR="::1")
    assert scrape(REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="203.0.113.9",
                  HTTP_AUTHORIZATION="Bearer scrape-token-4f9a")

    settings.MW_METRICS_ALLOW = ["10.0.0.0/8"]
    assert scrape(REMOTE_ADDR="10.1.2.3", HTTP_HOST="10.1.2.3:8000")
    assert Client().get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403
    settings.MW_METRICS_ALLOW, settings.MW_METRICS_TOKEN = ["none"], ""
    assert Client().get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


# -- /metrics: what it counts ----------------------------------------------------------------

def test_commands_are_counted_by_type_and_outcome_with_their_latencies(db):
    s = Scenario()
    before = {code: commands(type_, code) for type_, code in [
        ("mission.create", "OK"), ("mission.create", "DUPLICATE"), ("work.offer", "NOT_FOUND"),
        ("other", "VALIDATION_ERROR")]}
    appended = own(metrics.APPEND_SECONDS, "mw_append_seconds_count")
    locked = own(metrics.LOCK_WAIT_SECONDS, "mw_group_lock_wait_seconds_count")

    envelope = s.c.envelope("mission.create", {"title": "counted", "ownerId": s.owner.principal,
                                               "coordinatorId": s.c.principal})
    assert s.c.post(envelope).status_code == 200
    assert s.c.post(envelope).json()["duplicate"] is True  # the same id again
    assert s.c.send("work.offer", {"candidates": [s.w1.name], "mode": "sequential",
                                   "expiresAt": "2999-01-01T00:00:00Z"},
                    workItemId="no-such-item").status_code == 404
    assert s.c.send("no.such_type", {}).status_code == 400

    assert commands("mission.create", "OK") == before["OK"] + 1
    assert commands("mission.create", "DUPLICATE") == before["DUPLICATE"] + 1
    assert commands("work.offer", "NOT_FOUND") == before["NOT_FOUND"] + 1
    assert commands("other", "VALIDATION_ERROR") == before["VALIDATION_ERROR"] + 1
    assert own(metrics.APPEND_SECONDS, "mw_append_seconds_count") == appended + 1
    # Each of the four took the Group lock: the unknown type is refused by `decide`, and
    # the duplicate by its unique constraint after the write.
    assert own(metrics.LOCK_WAIT_SECONDS, "mw_group_lock_wait_seconds_count") == locked + 4

    scraped = scrape()
    for type_, code in [("mission.create", "OK"), ("mission.create", "DUPLICATE"),
                        ("work.offer", "NOT_FOUND"), ("other", "VALIDATION_ERROR")]:
        assert scraped[series(type_, code)] >= commands(type_, code)
    assert scraped[("mw_append_seconds_count", frozenset())] >= appended + 1
    assert ("mw_append_seconds_bucket", frozenset({"le": "+Inf"}.items())) in scraped


@pytest.mark.django_db(transaction=True)
def test_leases_offers_and_the_sweep_lag_are_read_at_scrape_time(clock):
    from apps.work import sweeper

    def gauges():
        scraped = scrape()
        return {name: scraped[(name, frozenset())] for name in (
            "mw_open_leases", "mw_offered_work_items", "mw_sweep_lag_seconds")}

    s = Scenario()
    assert gauges() == {"mw_open_leases": 0, "mw_offered_work_items": 0,
                        "mw_sweep_lag_seconds": 0}
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    assert gauges()["mw_offered_work_items"] == 1
    s.accept(item_id)
    s.start(item_id)  # a lease of MW_DEFAULT_LEASE_SECONDS (300)
    assert gauges() == {"mw_open_leases": 1, "mw_offered_work_items": 0,
                        "mw_sweep_lag_seconds": 0}

    later(clock, 300 + 42)  # the lease ran out 42 s ago, and no sweep has run
    assert gauges() == {"mw_open_leases": 1, "mw_offered_work_items": 0,
                        "mw_sweep_lag_seconds": 42}
    assert sweeper.sweep()["expiredLeases"] == 1
    assert gauges() == {"mw_open_leases": 0, "mw_offered_work_items": 0,
                        "mw_sweep_lag_seconds": 0}


@pytest.fixture
def celery_queue(settings):
    """The broker's default queue in this test's Redis database, empty before and after."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete("celery")
    yield client
    client.delete("celery")


@pytest.mark.django_db(transaction=True)
def test_reviews_still_to_run_and_the_celery_queue_are_read_at_scrape_time(celery_queue,
                                                                           monkeypatch):
    monkeypatch.setattr(notify_tasks.HINTS, "put", lambda group_id: None)  # the review's only

    def gauges():
        scraped = scrape()
        return (scraped[("mw_review_tasks_queued", frozenset())],
                scraped[("mw_celery_queue_length", frozenset({"queue": "celery"}.items()))])

    s = Scenario()
    assert gauges() == (0, 0)
    # No Celery worker runs here: the review's first task waits in the broker's queue.
    submitted_json(s, {"total": 3})
    assert gauges() == (1, 1)
    assert celery_queue.llen("celery") == 1
    celery_queue.delete("celery")
    assert gauges() == (1, 0)


def test_a_scrape_without_redis_still_answers_and_says_so(db, settings):
    settings.CELERY_BROKER_URL = CLOSED_PORT
    started = time.perf_counter()
    scraped = scrape()
    assert time.perf_counter() - started < WITHIN_REDIS_TIMEOUT
    assert scraped[("mw_metrics_source_up", frozenset({"source": "redis"}.items()))] == 0
    assert scraped[("mw_metrics_source_up", frozenset({"source": "postgres"}.items()))] == 1
    assert not any(name == "mw_celery_queue_length" for name, _ in scraped)
    assert ("mw_open_leases", frozenset()) in scraped


# -- WebSocket connections and their delivery lag ---------------------------------------------

APP = AgentFriendlyOriginValidator(URLRouter(websocket_urlpatterns))


class Behind:
    """A connection as the lag refresh sees one: its subscriptions."""

    def __init__(self, subscriptions: dict):
        self.subscriptions = subscriptions


@pytest.mark.django_db(transaction=True)
def test_an_open_websocket_shows_in_the_connections_and_its_lag_is_measured(settings,
                                                                          monkeypatch):
    settings.REDIS_URL = ""  # the embedded hub: this test's loop plays the server's
    monkeypatch.setattr(publish, "_server_loop", None)
    s = Scenario()
    for k in range(4):
        s.c.ok("mission.create", {"title": f"m{k}", "ownerId": s.owner.principal,
                                  "coordinatorId": s.c.principal})
    head = s.world.head
    connections = ports.plugged.observer.connections

    async def scenario():
        socket = WebsocketCommunicator(APP, "/ws/v1/", headers=[
            (b"authorization", f"Bearer {s.w1.token}".encode())])
        opened = own(metrics.WEBSOCKET_CONNECTIONS, "mw_websocket_connections")
        assert (await socket.connect())[0]
        assert own(metrics.WEBSOCKET_CONNECTIONS, "mw_websocket_connections") == opened + 1
        scraped = await in_thread(scrape)
        assert scraped[("mw_websocket_connections", frozenset())] >= opened + 1

        await socket.send_json_to({"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                   "afterSequence": 0})
        for _ in range(head):
            await socket.receive_json_from(timeout=5)
        await connections.refresh()
        assert own(metrics.WEBSOCKET_SUBSCRIPTIONS, "mw_websocket_subscriptions") >= 1
        assert own(metrics.DELIVERY_LAG_MAX, "mw_websocket_delivery_lag_max_events") == 0

        # A subscription that has sent only up to 2 is head - 2 behind.
        behind = Behind({s.world.group.id: Subscription(2, 0.0)})
        connections.open.add(behind)
        try:
            await connections.refresh()
            assert own(metrics.DELIVERY_LAG_MAX,
                       "mw_websocket_delivery_lag_max_events") == head - 2
            assert own(metrics.DELIVERY_LAG_TOTAL,
                       "mw_websocket_delivery_lag_events") == head - 2
        finally:
            connections.open.discard(behind)

        await socket.disconnect()
        assert own(metrics.WEBSOCKET_CONNECTIONS, "mw_websocket_connections") == opened
    asyncio.run(scenario())


def test_a_refused_handshake_is_not_counted_as_a_connection(db):
    async def scenario():
        opened = own(metrics.WEBSOCKET_CONNECTIONS, "mw_websocket_connections")
        socket = WebsocketCommunicator(APP, "/ws/v1/", headers=[(b"authorization",
                                                                 b"Bearer not-a-token")])
        assert not (await socket.connect())[0]
        assert own(metrics.WEBSOCKET_CONNECTIONS, "mw_websocket_connections") == opened
    asyncio.run(scenario())


def test_outcome_codes():
    from apps.ledger.pipeline import Answer
    from mission_weave.protocol.errors import ProtocolError

    assert observer.outcome_code(Answer(200, {"duplicate": False})) == "OK"
    assert observer.outcome_code(Answer(200, {"duplicate": True}, repeat=True)) == "DUPLICATE"
    refusal = ProtocolError("FORBIDDEN", "no")
    assert observer.outcome_code(Answer(403, refusal.as_json())) == "FORBIDDEN"
    assert observer.outcome_code(Answer(403, refusal.as_json(), repeat=True)) == "DUPLICATE"
    assert observer.outcome_code(refusal) == "FORBIDDEN"
    assert observer.outcome_code(RuntimeError("boom")) == "INTERNAL_ERROR"


# -- logs ------------------------------------------------------------------------------------

@pytest.fixture
def log_lines(settings):
    """The JSON lines the production logging would write, as they are written."""
    settings.MW_REQUEST_LOG = True
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield stream
    root.removeHandler(handler)


def parsed(stream: io.StringIO) -> list:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_request_and_command_has_one_json_line_and_no_secret_is_logged(db, log_lines):
    password = "pw-Sup3rSecret-7731"
    s = Scenario()
    registry.create_user("logged-human", password)
    registry.add_member(s.world.group, "user:logged-human", ["owner"])
    title = "body-text-never-logged-5521"
    envelope = s.c.envelope("mission.create", {"title": title, "ownerId": s.owner.principal,
                                               "coordinatorId": s.c.principal})
    log_lines.seek(0)
    log_lines.truncate()  # only what follows

    accepted = s.c.client.post(f"/api/v1/groups/{s.world.group.id}/commands",
                               json.dumps(envelope), content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {s.c.token}",
                               HTTP_X_REQUEST_ID="trace-0042")
    assert accepted.status_code == 200 and accepted["X-Request-ID"] == "trace-0042"
    assert s.w1.open_session().status_code == 201  # a signed session request
    query = s.c.client.get(f"/api/v1/groups/{s.world.group.id}/events?after=0&token=q-Secr3t",
                           HTTP_AUTHORIZATION=f"Bearer {s.c.token}",
                           HTTP_X_REQUEST_ID="not sane: spaces and {braces}")
    assert query.status_code == 200 and len(query["X-Request-ID"]) == 32
    human = Client()
    assert human.post("/login/", {"username": "logged-human",
                                  "password": password}).status_code == 302
    assert human.get(f"/g/{s.world.group.id}/").status_code == 200

    lines = parsed(log_lines)
    requests = [line for line in lines if line["logger"] == "mw.http"]
    decided = [line for line in lines if line["logger"] == "mw.command"]
    assert [(r["method"], r["status"]) for r in requests] == [
        ("POST", 200), ("POST", 201), ("GET", 200), ("POST", 302), ("GET", 200)]
    command_request = requests[0]
    assert command_request["requestId"] == "trace-0042"
    assert command_request["path"] == f"/api/v1/groups/{s.world.group.id}/commands"
    assert command_request["principal"] == s.c.principal
    assert command_request["groupId"] == s.world.group.id
    assert command_request["durationMs"] > 0 and command_request["level"] == "INFO"
    assert command_request["time"].endswith("+00:00")
    assert requests[2]["path"] == f"/api/v1/groups/{s.world.group.id}/events"
    assert requests[2]["requestId"] == query["X-Request-ID"]
    assert requests[3]["principal"] == "user:logged-human"  # signed in by this request
    assert requests[4]["principal"] == "user:logged-human"
    assert requests[4]["groupId"] == s.world.group.id

    assert len(decided) == 1
    assert {k: decided[0][k] for k in ("requestId", "groupId", "commandId", "commandType",
                                       "actor", "code")} == {
        "requestId": "trace-0042", "groupId": s.world.group.id, "commandId": envelope["id"],
        "commandType": "mission.create", "actor": s.c.principal, "code": "OK"}
    assert decided[0]["durationMs"] > 0

    written = log_lines.getvalue()
    for secret in (s.c.token, s.w1.token, envelope["signature"]["sig"], password, title,
                   "q-Secr3t", "token=", "after=0"):
        assert secret not in written, secret


def test_djangos_own_request_records_leave_the_request_and_its_query_string_out():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    request = RequestFactory().get("/api/v1/x?token=q-Secr3t-99")
    record = logging.LogRecord("django.request", logging.ERROR, __file__, 1,
                               "Internal Server Error: %s", (request.path,), None)
    record.request, record.status_code = request, 500
    handler.emit(record)
    line = json.loads(stream.getvalue())
    assert line["message"] == "Internal Server Error: /api/v1/x"
    assert line["status_code"] == 500 and "request" not in line
    assert "q-Secr3t-99" not in stream.getvalue()


def test_a_request_id_is_sent_back_even_with_the_log_off(db, settings):
    settings.MW_REQUEST_LOG = False
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="lb-7f3e:abc")
    assert response["X-Request-ID"] == "lb-7f3e:abc"
    assert Client().get("/healthz", HTTP_X_REQUEST_ID="x" * 129)["X-Request-ID"] != "x" * 129


def test_a_path_cannot_forge_a_line_of_the_plain_format(db, settings, log_lines):
    plain = logging.Formatter(settings.LOGGING["formatters"]["plain"]["format"])
    forged = "/x%0A2026-12-01 00:00:00,000 INFO mw.http: GET /admin/ 200"
    assert Client().get(forged).status_code == 404
    (record,) = [json.loads(line) for line in log_lines.getvalue().splitlines()]
    assert record["path"] == "/x\n2026-12-01 00:00:00,000 INFO mw.http: GET /admin/ 200"
    message = plain.format(logging.makeLogRecord({"msg": record["message"]}))
    assert "\n" not in message and "/x\\x0a2026-12-01" in message
