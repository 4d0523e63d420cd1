"""§10.1's ambiguity gate through HTTP on PostgreSQL: an essential ambiguity raised in the
WorkItem Conversation blocks the first acceptance and a renewed one after a revision; a
prose `resolution` message does not lift it, a corrected contract (work.revise_contract)
does. Each refusal appends nothing, and the log stays verifiable."""

import pytest

from apps.ledger.verify import verify_group
from tests.samples import contract
from tests.support import Scenario, assert_error


@pytest.fixture
def s(db):
    return Scenario()


def refused(s, response) -> dict:
    head = s.world.head
    error = assert_error(response, 409, "TRANSITION_NOT_PERMITTED")
    assert s.world.head == head
    return error


def raise_ambiguity(s, item_id, worker=None) -> str:
    events = (worker or s.w1).ok("conversation.post", {
        "kind": "ambiguity", "text": "Does 'one page' mean 500 words or one A4 page?"},
        workItemId=item_id)
    return events[0]["data"]["messageId"]


def test_a_renewed_acceptance_waits_for_the_revision_that_resolves_the_ambiguity(s):
    item_id = s.queued()
    s.c.ok("work.revise_contract", {"contract": contract(goal="Summarize Q3")},
           workItemId=item_id)
    question = raise_ambiguity(s, item_id)

    error = refused(s, s.w1.send("work.accept_offer", {"contractRevision": 2},
                                 workItemId=item_id))
    assert error["details"] == {"openAmbiguities": [question]}

    answer = s.c.ok("conversation.post", {"kind": "resolution", "resolves": question,
                                          "text": "500 words"}, workItemId=item_id)
    assert answer[0]["data"]["cleared"] is False
    assert s.item(item_id)["openAmbiguities"] == [question]
    refused(s, s.w1.send("work.accept_offer", {"contractRevision": 2}, workItemId=item_id))

    revised = s.c.ok("work.revise_contract", {"contract": contract(goal="Summarize Q3 in "
                                                                        "500 words")},
                     workItemId=item_id)
    assert revised[0]["data"]["resolvedAmbiguities"] == [question]
    events = s.w1.ok("work.accept_offer", {"contractRevision": 3}, workItemId=item_id)

    assert [e["type"] for e in events] == ["work.contract_accepted"]
    assert s.item(item_id)["openAmbiguities"] == []
    s.start(item_id)
    assert s.item(item_id)["state"] == "active"
    assert verify_group(s.world.group.id) == []


def test_a_resolution_message_does_not_open_a_first_acceptance(s):
    item_id = s.authorize()
    s.offer(item_id)
    question = raise_ambiguity(s, item_id)
    s.c.ok("conversation.post", {"kind": "resolution", "resolves": question, "text": "Q3"},
           workItemId=item_id)

    refused(s, s.w1.send("work.accept_offer", {"contractRevision": 1}, workItemId=item_id))

    s.c.ok("work.revise_contract", {"contract": contract(goal="Summarize Q3")},
           workItemId=item_id)
    s.accept(item_id)
    assert s.item(item_id)["state"] == "queued"
    assert verify_group(s.world.group.id) == []
