"""The WorkItem timeline and Conversation (apps/dashboard/timeline.py, conversation.py)
on real audit trails from the append pipeline: an item accepted, started, renewed,
checkpointed, restarted, blocked, unblocked and handed to a new owner, with late commands
of the fenced owner refused; an ambiguity answered, then resolved by a revised contract.
Their templates rendered from the same data."""

import pytest
from django.template.loader import render_to_string
from django.test import RequestFactory

from apps.api.views import audit_trail
from apps.dashboard.conversation import conversation
from apps.dashboard.timeline import timeline
from tests.support import Scenario, assert_error, contract, later

PROGRESS = {"phase": "draft", "milestones": ["outline", "sources"], "nextCheckpoint": "figures",
            "blockers": [], "estimate": {"remainingSeconds": 900}}


@pytest.fixture
def s(db, clock):
    return Scenario()


def lived(s: Scenario, clock) -> tuple[str, str, str]:
    """An item through two leases of w1 and on to w2, with w1's late commands refused:
    (item id, first lease id, second lease id)."""
    item_id, first = s.running(s.w1)
    later(clock, 60)
    s.w1.ok("lease.renew", {}, **s.lease_fields(item_id))
    later(clock, 60)
    s.w1.ok("work.checkpoint", {"progress": PROGRESS}, **s.lease_fields(item_id))
    later(clock, 10)
    second = s.start(item_id)
    assert_error(s.w1.send("lease.renew", {}, workItemId=item_id, ownershipEpoch=1,
                           leaseId=first["leaseId"]), 409, "STALE_LEASE")
    later(clock, 5)  # the clock is stopped: at one moment an event goes before a refusal
    held = s.lease_fields(item_id)
    s.w1.ok("work.block", {"checkpoint": {"progress": PROGRESS},
                           "requiredResolution": "API key for X"}, **held)
    later(clock, 10)
    s.c.ok("work.unblock", {"resolution": "key attached"}, workItemId=item_id)
    later(clock, 600)  # w1 does not start again by its start-by deadline
    s.offer(item_id, s.w2)
    s.accept(item_id, s.w2)
    assert_error(s.w1.send("work.checkpoint", {"progress": PROGRESS}, **held),
                 409, "STALE_OWNERSHIP")
    return item_id, first["leaseId"], second["leaseId"]


def test_the_timeline_of_a_real_item_groups_its_epochs_leases_and_fenced_refusals(s, clock):
    item_id, first_lease, second_lease = lived(s, clock)
    trail = audit_trail(s.world.group.id, item_id)

    before, first, between, second = timeline(trail["events"], trail["refusedCommands"])

    assert [e["kind"] for e in before["entries"]] == ["work.authorized", "work.offered"]
    assert (first["epoch"], first["owner"]) == (1, s.w1.principal)
    assert [e["kind"] for e in first["entries"]] == [
        "work.offer_accepted", "work.started", "lease.renewed", "work.checkpointed",
        "work.started", "refused", "work.blocked", "work.unblocked",
        "work.ownership_expired", "refused"]
    assert first["ended"] == "ownership expired: the start-by deadline passed"
    one, two = first["leases"]
    assert (one["lease_id"], one["end"], len(one["renewals"])) == (first_lease, "checkpointed", 1)
    assert one["expires_at"] == one["renewals"][0]["expires_at"] > one["started_at"]
    assert (two["lease_id"], two["end"], two["renewals"]) == (second_lease, "blocked", [])
    refused = [e for e in first["entries"] if e["kind"] == "refused"]
    assert [(e["refusal"]["type"], e["refusal"]["code"], e["fenced"]) for e in refused] == [
        ("lease.renew", "STALE_LEASE", True), ("work.checkpoint", "STALE_OWNERSHIP", True)]
    blocked = next(e for e in first["entries"] if e["kind"] == "work.blocked")
    assert (blocked["progress"], blocked["required_resolution"]) == (PROGRESS, "API key for X")
    assert blocked["summary"].startswith("blocked: needs “API key for X”")
    assert [e["kind"] for e in between["entries"]] == ["work.offered"]
    assert (second["epoch"], second["owner"], second["ended"]) == (2, s.w2.principal, None)
    assert [e["kind"] for e in second["entries"]] == ["work.offer_accepted"]


def test_the_timeline_template_renders_epochs_leases_and_fenced_entries(s, clock):
    item_id, first_lease, _ = lived(s, clock)
    trail = audit_trail(s.world.group.id, item_id)

    html = render_to_string("dashboard/_timeline.html",
                            {"timeline": timeline(trail["events"], trail["refusedCommands"])})

    assert 'id="timeline"' in html
    assert html.count('data-epoch="1"') == html.count('data-epoch="2"') == 1
    assert f"Ownership epoch 2 — {s.w2.principal}" in html
    assert f'data-lease="{first_lease}" data-end="checkpointed"' in html
    assert html.count('class="entry fenced" data-kind="refused"') == 2
    assert "refused: <strong>STALE_OWNERSHIP</strong>" in html and "(kept for audit)" in html
    assert "next checkpoint: figures" in html and "900 s left" in html


def test_an_answered_ambiguity_stays_open_until_the_contract_is_revised(s):
    item_id = s.authorize()
    (raised,) = s.w1.ok("conversation.post", {"kind": "ambiguity", "text": "Which quarter?"},
                        workItemId=item_id)
    ambiguity_id = raised["data"]["messageId"]
    s.c.ok("conversation.post", {"kind": "resolution", "text": "Q3", "resolves": ambiguity_id},
           workItemId=item_id)

    answered = conversation(audit_trail(s.world.group.id, item_id)["events"],
                            s.item(item_id)["openAmbiguities"])
    s.c.ok("work.revise_contract", {"contract": contract(goal="Summarize Q3")},
           workItemId=item_id)
    revised = conversation(audit_trail(s.world.group.id, item_id)["events"],
                           s.item(item_id)["openAmbiguities"])

    assert [m["kind"] for m in answered["messages"]] == ["ambiguity", "resolution"]
    assert [(a["message_id"], a["open"]) for a in answered["open"]] == [(ambiguity_id, True)]
    assert revised["open"] == []
    (resolved,) = revised["ambiguities"]
    assert (resolved["resolved_how"], resolved["resolved_by"]) == ("contract revision 2",
                                                                   s.c.principal)


def test_the_conversation_template_shows_the_banner_and_the_form_only_when_allowed(s):
    item_id = s.authorize()
    s.w1.ok("conversation.post", {"kind": "ambiguity", "text": "Which quarter?"},
            workItemId=item_id)
    talk = conversation(audit_trail(s.world.group.id, item_id)["events"],
                        s.item(item_id)["openAmbiguities"])
    request = RequestFactory().get("/")

    def rendered(**allowed):
        context = {"conversation": talk, "post_url": "/post/", "can_post": False,
                   "viewer": {"group_id": s.world.group.id}, "item": {"id": item_id},
                   "can_raise": False, "can_resolve": False, **allowed}
        return render_to_string("dashboard/_conversation.html", context, request=request)

    reader, member, coordinator = rendered(), rendered(can_post=True), rendered(
        can_post=True, can_raise=True, can_resolve=True)

    assert "Acceptance is blocked while this ambiguity is open" in reader
    assert 'data-kind="ambiguity"' in reader and 'id="post-message"' not in reader
    assert 'id="post-message"' in member and "csrfmiddlewaretoken" in member
    assert 'name="message-text"' in member and 'value="ambiguity"' not in member
    assert 'value="ambiguity"' in coordinator and 'value="resolution"' in coordinator
    assert 'name="message-resolves"' in coordinator
