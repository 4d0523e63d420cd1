"""The sweeper racing commands and other sweepers on PostgreSQL, with real threads
(each its own connection), released together by a Barrier.

Every race has two acceptable outcomes per WorkItem and never both: the command wins
the Group lock and the deadline is no longer due, or the sweep wins and the command is
refused. The sweepers here sweep "in the future" (`sweep(now=...)` at the deadline)
while the commands run at the real time, so each side is valid on its own and only the
order on the Group lock decides. After every race the log is checked: at most one live
owner and one open lease per WorkItem, no event uses a closed lease, ownership epochs
strictly increase, and mw_verify passes.
"""

import threading
import time
from datetime import timedelta
from functools import partial

import pytest
from django.db import connection, transaction

from apps.ledger.models import Event, Group
from apps.ledger.verify import verify_group
from apps.work import sweeper, work_store
from mission_weave.core import fencing
from mission_weave.protocol.timefmt import parse_time
from tests.integration.test_races import post, race
from tests.support import Scenario, contract, evidence

pytestmark = pytest.mark.django_db(transaction=True)

ITEMS = 6
ROUNDS = 3


# Events that end the open lease of their WorkItem, and those that must name an open one.
CLOSES = {"lease.expired", "lease.revoked", "work.checkpointed", "work.blocked",
          "work.submitted"}
USES = {"lease.renewed", "work.progress_reported", "work.checkpointed", "work.blocked",
        "work.submitted"}


def check_invariants(group_id: str) -> None:
    """Walk the Group's log: one open lease and one owner at a time per WorkItem, no
    event on a closed lease, strictly increasing ownership epochs; then mw_verify."""
    open_lease, owner, epochs = {}, {}, {}
    for row in Event.objects.filter(group_id=group_id).order_by("sequence"):
        item, data = row.work_item_id, row.data
        if row.type == "work.offer_accepted":
            assert owner.get(item) is None, f"{item}: a second live owner at {row.sequence}"
            assert data["ownershipEpoch"] > epochs.get(item, 0), f"{item}: epoch not increased"
            owner[item], epochs[item] = data["agentId"], data["ownershipEpoch"]
        elif row.type == "work.ownership_expired" or (
                row.type == "work.unblocked" and data["next"] == "open") or row.type in (
                "work.failed", "work.cancelled"):
            owner[item] = None
        if row.type == "work.started":
            assert open_lease.get(item) is None, f"{item}: a second open lease at {row.sequence}"
            assert data["agentId"] == owner.get(item), f"{item}: started by a non-owner"
            open_lease[item] = data["leaseId"]
        if row.type in USES or row.type in CLOSES:
            assert data["leaseId"] == open_lease.get(item), (
                f"{item}: {row.type} at {row.sequence} names a lease that is not open")
        if row.type in CLOSES:
            open_lease[item] = None
    assert verify_group(group_id) == []


BIG_CARD = {"version": "1", "capabilities": [{"id": "summarize", "version": "1"}],
            "maxConcurrency": 1000}


def cast() -> Scenario:
    """The usual Scenario, with workers whose Agent Card admits many WorkItems at once
    (the maxConcurrency backstop is not what these races are about)."""
    s = Scenario()
    slug = s.world.group.slug
    s.w1 = s.world.agent(f"wa-{slug}", card=BIG_CARD)
    s.w2 = s.world.agent(f"wb-{slug}", card=BIG_CARD)
    return s


def running(s: Scenario, count: int) -> list:
    """`count` WorkItems started by w1: [(item id, lease fields, lease expiry)]."""
    items = []
    for _ in range(count):
        item_id, started = s.running(s.w1)
        items.append((item_id, s.lease_fields(item_id), parse_time(started["expiresAt"])))
    return items


def end_round(s: Scenario, items: list) -> None:
    """Cancel a round's WorkItems, so that the next round's sweep sees only its own."""
    for item_id, _, _ in items:
        s.c.ok("work.cancel", {"reason": "next round"}, workItemId=item_id)


def owner_is_live(s: Scenario, item_id: str, moment) -> bool:
    """The item's ownership as the fencing rules see it at `moment`, from its projection."""
    view = work_store.load_items(s.world.group.id, [item_id])
    return fencing.owner_is_live(view.items[item_id], moment)


def sweep_at(moment):
    return lambda: sweeper.sweep(now=moment)


def test_two_sweepers_at_once_sweep_every_due_item_exactly_once():
    scenarios = [cast() for _ in range(3)]
    expiries = [expiry for s in scenarios for _, _, expiry in running(s, ITEMS)]
    moment = max(expiries)

    results = race([sweep_at(moment) for _ in range(4)])

    assert sum(r["expiredLeases"] for r in results) == len(scenarios) * ITEMS
    # A lease timeout appends only lease.expired; the next work.offer fences the owner.
    assert sum(r["expiredOwnerships"] for r in results) == 0
    assert sweeper.sweep(now=moment)["expiredLeases"] == 0
    for s in scenarios:
        expired = Event.objects.filter(group_id=s.world.group.id, type="lease.expired")
        assert expired.count() == ITEMS
        assert len(set(expired.values_list("work_item_id", flat=True))) == ITEMS
        assert not Event.objects.filter(group_id=s.world.group.id,
                                        type="work.ownership_expired").exists()
        check_invariants(s.world.group.id)


def test_a_group_held_by_another_transaction_is_skipped_not_waited_on():
    s = cast()
    (_, _, expiry), = running(s, 1)
    ready, release = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic():
                Group.objects.select_for_update().get(id=s.world.group.id)
                ready.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert ready.wait(30)
        started = time.monotonic()
        (held,) = race([sweep_at(expiry)])
        assert time.monotonic() - started < 5
        assert (held["skippedGroups"], held["expiredLeases"]) == (1, 0)
    finally:
        release.set()
        holder.join(30)
    assert sweeper.sweep(now=expiry)["expiredLeases"] == 1
    check_invariants(s.world.group.id)


def test_renew_against_the_sweep_at_the_expiry_boundary():
    s = cast()
    for _ in range(ROUNDS):
        items = running(s, ITEMS)
        moment = max(expiry for _, _, expiry in items)
        renewals = [s.w1.envelope("lease.renew", {}, **fields) for _, fields, _ in items]
        results = race([sweep_at(moment)]
                       + [lambda e=e: post(s.w1.token, s.world.group.id, e) for e in renewals])
        swept, answers = results[0], results[1:]
        for (item_id, _, _), (status, body) in zip(items, answers):
            item = s.item(item_id)
            if status == 200:  # renewed first: the lease lives past the sweep's moment
                assert item["lease"] is not None and item["owner"] == s.w1.name
                assert parse_time(item["lease"]["expiresAt"]) > moment
            else:  # swept first: the renewal is refused, the owner recorded but not live
                assert body["error"]["code"] == "LEASE_EXPIRED", body
                assert item["lease"] is None and item["owner"] == s.w1.name
                assert not owner_is_live(s, item_id, moment)
        refused = sum(1 for status, _ in answers if status != 200)
        assert (swept["expiredLeases"], swept["expiredOwnerships"]) == (refused, 0)
        check_invariants(s.world.group.id)
        end_round(s, items)


def test_submit_against_lease_expiry():
    s = cast()
    for _ in range(ROUNDS):
        items = running(s, ITEMS)
        moment = max(expiry for _, _, expiry in items)
        submits = [s.w1.envelope("work.submit", {
            "contractRevision": 1, "artifacts": [s.deliver(item_id)],
            "evidence": [evidence(["ac1", "ac2"])]}, **fields) for item_id, fields, _ in items]
        results = race([sweep_at(moment)]
                       + [lambda e=e: post(s.w1.token, s.world.group.id, e) for e in submits])
        swept, answers = results[0], results[1:]
        for (item_id, _, _), (status, body) in zip(items, answers):
            item = s.item(item_id)
            if status == 200:
                assert item["state"] == "submitted"
            else:  # a late result: refused, and it never completes the item
                assert body["error"]["code"] == "LEASE_EXPIRED", body
                assert (item["state"], item["owner"], item["lease"]) == (
                    "active", s.w1.name, None)
                assert not owner_is_live(s, item_id, moment)
        refused = sum(1 for status, _ in answers if status != 200)
        assert (swept["expiredLeases"], swept["expiredOwnerships"]) == (refused, 0)
        check_invariants(s.world.group.id)
        end_round(s, items)


def test_accept_against_offer_expiry_under_auto_dispatch():
    s = cast()
    mission_id = s.c.ok("mission.create", {
        "title": "auto", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "autoDispatch": True})[0]["missionId"]
    for _ in range(ROUNDS):
        items = []
        for _ in range(ITEMS):
            item_id = s.c.ok("work.authorize", {"missionId": mission_id,
                                                "contract": contract()})[0]["workItemId"]
            offered = s.offer(item_id, s.w1, s.w2)
            items.append((item_id, parse_time(offered[-1]["data"]["offers"][0]["expiresAt"])))
        moment = max(expiry for _, expiry in items)
        accepts = [s.w1.envelope("work.accept_offer", {"contractRevision": 1},
                                 workItemId=item_id) for item_id, _ in items]
        head = Group.objects.get(id=s.world.group.id).head_sequence
        results = race([sweep_at(moment)]
                       + [lambda e=e: post(s.w1.token, s.world.group.id, e) for e in accepts])
        swept, answers = results[0], results[1:]
        for (item_id, _), (status, body) in zip(items, answers):
            item = s.item(item_id)
            if status == 200:  # accepted while the offer lived: no redispatch after it
                assert (item["state"], item["owner"]) == ("queued", s.w1.name)
            else:  # the sweep moved the offer on to w2 first
                assert body["error"]["code"] == "OFFER_NOT_LIVE", body
                assert item["state"] == "offered" and item["owner"] is None
                assert [o["agentId"] for o in item["offers"] if o["status"] == "live"] == [
                    s.w2.name]
        # This round's items are redispatched exactly when their acceptance lost; the
        # sweep may also reassign earlier rounds' items whose start-by passed by `moment`.
        redispatched = Event.objects.filter(
            group_id=s.world.group.id, sequence__gt=head, type="work.offered", actor="system",
            work_item_id__in=[item_id for item_id, _ in items]).count()
        assert redispatched == sum(1 for status, _ in answers if status != 200)
        assert swept["redispatched"] >= redispatched
        check_invariants(s.world.group.id)


def test_session_replacement_during_a_renewal():
    s = cast()
    for _ in range(ROUNDS):
        items = running(s, ITEMS)
        renewals = [s.w1.envelope("lease.renew", {}, **fields) for _, fields, _ in items]
        token = s.w1.token
        results = race([s.w1.open_session]
                       + [partial(post, token, s.world.group.id, e) for e in renewals])
        opened, answers = results[0], results[1:]
        assert opened.status_code == 201
        for (item_id, _, _), (status, body) in zip(items, answers):
            # Renewed or not, the replacement revoked the lease before it returned.
            assert status == 200 or body["error"]["code"] in ("STALE_SESSION", "STALE_LEASE"), body
            item = s.item(item_id)
            assert (item["state"], item["owner"], item["lease"]) == ("queued", s.w1.name, None)
        check_invariants(s.world.group.id)
        for item_id, _, _ in items:  # the new session starts them again, for the next round
            s.start(item_id, s.w1)
            s.c.ok("work.cancel", {"reason": "next round"}, workItemId=item_id)
        check_invariants(s.world.group.id)


def test_sweepers_and_commands_across_groups_leave_every_group_consistent():
    scenarios = [cast() for _ in range(2)]
    batches = [(s, running(s, ITEMS)) for s in scenarios]
    moment = max(expiry for _, items in batches for _, _, expiry in items) + timedelta(seconds=1)
    calls = [sweep_at(moment) for _ in range(3)]
    for s, items in batches:
        for _, fields, _ in items[: ITEMS // 2]:
            envelope = s.w1.envelope("lease.renew", {}, **fields)
            calls.append(lambda s=s, e=envelope: post(s.w1.token, s.world.group.id, e))
    race(calls)
    sweeper.sweep(now=moment)
    for s, items in batches:
        for item_id, _, _ in items:
            assert s.item(item_id)["lease"] is None or parse_time(
                s.item(item_id)["lease"]["expiresAt"]) > moment
        check_invariants(s.world.group.id)


# --- timeouts under autoDispatch (§11.4, §11.5): a timeout and its attempt's end are one append;
# --- the retry after the backoff is another, made once -------------------------------------------

def auto_running(s: Scenario, count: int) -> list:
    """`count` WorkItems of a Mission with automatic dispatch, offered to w1 alone,
    accepted and started: [(item id, lease fields, lease expiry)]."""
    mission_id = s.c.ok("mission.create", {
        "title": "auto", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "autoDispatch": True})[0]["missionId"]
    items = []
    for _ in range(count):
        item_id = s.c.ok("work.authorize", {"missionId": mission_id,
                                            "contract": contract()})[0]["workItemId"]
        s.offer(item_id, s.w1)
        s.accept(item_id, s.w1)
        started = s.start(item_id, s.w1)
        items.append((item_id, s.lease_fields(item_id), parse_time(started["expiresAt"])))
    return items


def system_offers(group_id: str, item_id: str) -> int:
    return Event.objects.filter(group_id=group_id, work_item_id=item_id, type="work.offered",
                                actor="system").count()


BACKOFF = timedelta(seconds=10)  # the sample contract's backoff after attempt 1


def test_a_late_renewal_against_the_sweep_ending_its_attempt():
    s = cast()
    for _ in range(ROUNDS):
        items = auto_running(s, ITEMS)
        moment = max(expiry for _, _, expiry in items)
        # Renewed for longer than the backoff, so that the retry's sweep leaves them be.
        renewals = [s.w1.envelope("lease.renew", {"leaseSeconds": 600}, **fields)
                    for _, fields, _ in items]
        raced = ITEMS // 2  # the others' renewals come after the sweep: late for sure
        results = race([sweep_at(moment)]
                       + [lambda e=e: post(s.w1.token, s.world.group.id, e)
                          for e in renewals[:raced]])
        swept, answers = results[0], results[1:]
        # A sweep that found the Group held by a renewal skipped it: the next one comes.
        catch_up = sweeper.sweep(now=moment)
        swept = {k: swept[k] + catch_up[k] for k in swept}
        answers += [post(s.w1.token, s.world.group.id, e) for e in renewals[raced:]]
        timed_out = []
        for (item_id, fields, _), (status, body) in zip(items, answers):
            item = s.item(item_id)
            if status == 200:  # renewed first: still w1's, live past the sweep's moment
                assert (item["state"], item["owner"]) == ("active", s.w1.name)
                assert parse_time(item["lease"]["expiresAt"]) > moment
                continue
            # Swept first: expired, fenced and failed with a retry time in one append;
            # the late renewal is refused and kept for audit.
            assert body["error"]["code"] in ("LEASE_EXPIRED", "STALE_LEASE",
                                             "STALE_OWNERSHIP"), body
            assert (item["state"], item["owner"], item["lease"]) == ("failed", None, None)
            audit = s.c.get(f"work-items/{item_id}/audit").json()
            assert "lease.renew" in [r["type"] for r in audit["refusedCommands"]]
            timed_out.append((item_id, fields))
        refused = len(timed_out)
        assert refused >= ITEMS - raced
        assert (swept["expiredLeases"], swept["expiredOwnerships"], swept["failed"],
                swept["redispatched"]) == (refused, refused, refused, 0)
        # Once the backoff has passed, each is offered again, once, to another worker.
        assert sweeper.sweep(now=moment + BACKOFF)["redispatched"] == refused
        for item_id, fields in timed_out:
            assert system_offers(s.world.group.id, item_id) == 1
            live = [o["agentId"] for o in s.item(item_id)["offers"] if o["status"] == "live"]
            assert live == [s.w2.name]
            # Exactly one live owner: the new one, under a higher epoch; the old lease
            # stays dead.
            assert s.accept(item_id, s.w2)["ownershipEpoch"] == 2
            again = s.w1.send("lease.renew", {}, **fields)
            assert again.json()["error"]["code"] == "STALE_OWNERSHIP"
        check_invariants(s.world.group.id)
        end_round(s, items)


def test_two_sweepers_end_every_timed_out_attempt_exactly_once_and_retry_it_once():
    batches = [(s, auto_running(s, ITEMS)) for s in (cast() for _ in range(3))]
    moment = max(expiry for _, items in batches for _, _, expiry in items)

    results = race([sweep_at(moment) for _ in range(4)])

    total = len(batches) * ITEMS
    assert sum(r["expiredLeases"] for r in results) == total
    assert sum(r["expiredOwnerships"] for r in results) == total
    assert sum(r["failed"] for r in results) == total
    assert sum(r["redispatched"] for r in results) == 0
    assert sweeper.sweep(now=moment)["failed"] == 0

    retries = race([sweep_at(moment + BACKOFF) for _ in range(4)])

    assert sum(r["redispatched"] for r in retries) == total
    assert sweeper.sweep(now=moment + BACKOFF)["redispatched"] == 0
    for s, items in batches:
        for item_id, _, _ in items:
            assert system_offers(s.world.group.id, item_id) == 1
            item = s.item(item_id)
            assert (item["state"], item["owner"]) == ("offered", None)
        check_invariants(s.world.group.id)
