"""The metrics each process counts as it works (docs/operations.md, "Metrics"). Created
when OperationsConfig.ready() imports this module, after metric_files.start() chose the
multiprocess mode; the state read at scrape time is in collectors.py."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from mission_weave.core.commands import COMMAND_TYPES

disable_created_metrics()  # no `_created` series: the multiprocess mode has none either

# This process's metrics when there is no multiprocess folder; with one, the scrape reads
# the files instead (views.metrics).
REGISTRY = CollectorRegistry()

# From 0.5 ms (a command on an idle Group) to 5 s (something is wrong).
SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

COMMANDS = Counter(
    "mw_commands", "Commands answered by the pipeline, by command type and outcome code "
    "(OK, DUPLICATE or the PROTOCOL error code).", ["type", "code"], registry=REGISTRY)
APPEND_SECONDS = Histogram(
    "mw_append_seconds", "Seconds from decide to the end of the write batch of an accepted "
    "command, under the Group lock.", buckets=SECONDS, registry=REGISTRY)
LOCK_WAIT_SECONDS = Histogram(
    "mw_group_lock_wait_seconds", "Round trip of the statement that takes the Group lock "
    "(with the aggregate's first read), waiting included.", buckets=SECONDS, registry=REGISTRY)

GROUP_COMMIT_SIZE = Histogram(
    "mw_group_commit_batch_size", "Commands decided together in one transaction by group "
    "commit (MW_GROUP_COMMIT).", buckets=(1, 2, 4, 8, 16, 32, 64), registry=REGISTRY)

WEBSOCKET_CONNECTIONS = Gauge(
    "mw_websocket_connections", "Open agent WebSocket connections (/ws/v1/).",
    multiprocess_mode="livesum", registry=REGISTRY)
WEBSOCKET_SUBSCRIPTIONS = Gauge(
    "mw_websocket_subscriptions", "Group subscriptions of the open WebSocket connections.",
    multiprocess_mode="livesum", registry=REGISTRY)
DELIVERY_LAG_MAX = Gauge(
    "mw_websocket_delivery_lag_max_events", "Largest delivery lag of one subscription: the "
    "Group's head sequence minus the last sequence sent to it.",
    multiprocess_mode="livemax", registry=REGISTRY)
DELIVERY_LAG_TOTAL = Gauge(
    "mw_websocket_delivery_lag_events", "Delivery lag summed over every subscription (events "
    "committed but not yet sent).", multiprocess_mode="livesum", registry=REGISTRY)

KNOWN_TYPES = frozenset(COMMAND_TYPES)


def command_type(envelope) -> str:
    """The `type` label: a command type of the protocol, else "other" (a client's
    malformed envelope must not make a new time series)."""
    type_ = envelope.get("type") if isinstance(envelope, dict) else None
    return type_ if type_ in KNOWN_TYPES else "other"
