"""mw_verify's replay (apps/ledger/verify.replay_through) reads the log its own way, for
speed (issue 27): rows with the time written by PostgreSQL, the data parsed by orjson,
the chain checked by chain.link_problems. It must see exactly what the wire documents
(history.history) checked by chain.check_chain and evolved one by one see: the same
state, the same problems, the same last hash."""

import json

import pytest
from django.db import connection

from apps.ledger import history, verify
from mission_weave.core import chain, state

pytestmark = pytest.mark.django_db


def by_documents(group_id: str) -> tuple[state.View, list, int, str]:
    """The replay as the wire documents give it (what replay_through did before)."""
    view, problems, last, last_hash = state.View(), [], 0, chain.GENESIS_HASH
    for document in history.history(group_id):
        problems += chain.check_chain([document], last_hash, last + 1)
        last, last_hash = document["sequence"], document["hash"]
        verify.apply(view, document)
    return view, problems, last, last_hash


def busy(s) -> str:
    item_id, _ = s.running()
    s.w1.ok("work.progress", {"phase": "halfway", "estimate": {"confidence": 0.75}},
            **s.lease_fields(item_id))
    s.authorize()
    return s.world.group.id


def tamper(sql: str, params: list) -> None:
    """Change the append-only log (its triggers off for this transaction only)."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params)
        cursor.execute("SET LOCAL session_replication_role = origin")


def same(group_id: str) -> tuple:
    view, problems, last, last_hash = verify.replay_through(group_id)
    expected = by_documents(group_id)
    assert (verify.state_document(view), problems, last, last_hash) == \
        (verify.state_document(expected[0]), *expected[1:])
    return problems, last


def test_the_replay_sees_what_the_wire_documents_give(scenario):
    group_id = busy(scenario)
    problems, last = same(group_id)
    assert problems == [] and last == scenario.world.head


def test_an_event_of_a_whole_second_is_written_without_a_fraction(scenario):
    """format_time drops a zero fraction: the replay writes the time the same way, or
    the hash of such an event would not match. The last event is moved to a whole
    second and sealed again, as the pipeline would have sealed it then."""
    group_id = busy(scenario)
    head = scenario.world.head
    tamper("UPDATE ledger_event SET occurred_at = date_trunc('second', occurred_at) "
           "WHERE group_id = %s AND sequence = %s", [group_id, head])
    document = history.events_between(group_id, head, head)[0]
    assert "." not in document["occurredAt"]
    tamper("UPDATE ledger_event SET hash = %s WHERE group_id = %s AND sequence = %s",
           [chain.seal(document)["hash"], group_id, head])
    problems, _last = same(group_id)
    assert problems == []


@pytest.mark.parametrize("sql, found", [
    ("UPDATE ledger_event SET data = jsonb_set(data, '{phase}', '\"done\"') "
     "WHERE group_id = %s AND type = 'work.progress_reported'", "hash does not match"),
    ("UPDATE ledger_event SET occurred_at = occurred_at + interval '1 microsecond' "
     "WHERE group_id = %s AND sequence = 3", "sequence 3: hash does not match"),
    ("UPDATE ledger_event SET prev_hash = 'sha256:' || repeat('0', 64) "
     "WHERE group_id = %s AND sequence = 4", "sequence 4: prevHash does not match"),
])
def test_a_changed_event_is_reported_as_the_documents_report_it(scenario, sql, found):
    group_id = busy(scenario)
    tamper(sql, [group_id])
    problems, _last = same(group_id)
    assert any(found in problem for problem in problems), problems


@pytest.mark.parametrize("huge", [2**60, 2**70])
def test_an_integer_outside_the_domain_in_the_stored_data_is_not_let_through(scenario, huge):
    """Never written by the server (the protocol refuses integers beyond 2**53-1), so only
    a changed log holds one. Within 64 bits the replay refuses to hash it, as the
    documents' check does (RFC 8785 cannot encode it); beyond, orjson reads it as a
    float, whose hash cannot be the stored one: reported (the documents' check stops)."""
    group_id = busy(scenario)
    tamper("UPDATE ledger_event SET data = jsonb_set(data, '{huge}', %s::jsonb) "
           "WHERE group_id = %s AND sequence = 2", [json.dumps(huge), group_id])
    with pytest.raises(ValueError):
        by_documents(group_id)
    if huge < 2**64:
        with pytest.raises(ValueError):
            verify.replay_through(group_id)
    else:
        _view, problems, _last, _hash = verify.replay_through(group_id)
        assert "sequence 2: hash does not match its content" in problems
