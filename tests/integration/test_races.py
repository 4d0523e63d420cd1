"""Real races on PostgreSQL: threads with their own connections and their own test
clients, released together by a Barrier, so the commands really collide on the Group
row lock (DESIGN.md: one Group, one lock; first acceptance wins atomically; different
Groups never contend)."""

import json
import threading
from datetime import timedelta
from functools import partial

import pytest
from django.db import connection, transaction
from django.test import Client

from apps.ledger.models import Event, Group
from apps.ledger.verify import verify_group
from mission_weave.protocol.timefmt import format_time
from tests.support import World, contract, evidence, now

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = 8
ROUNDS = 20


def post(token: str, group_id: str, envelope: dict) -> tuple:
    """One HTTP command from a fresh client: (status, body)."""
    response = Client().post(f"/api/v1/groups/{group_id}/commands", json.dumps(envelope),
                             content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {token}")
    return response.status_code, response.json()


def race(calls, timeout=60) -> list:
    """Run each call in its own thread, all released at once; their results in order."""
    barrier = threading.Barrier(len(calls))
    results, errors = [None] * len(calls), []

    def run(index, call):
        try:
            barrier.wait(timeout=timeout)
            results[index] = call()
        except BaseException as error:  # re-raised in the test's thread below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(t.is_alive() for t in threads), "a racing request did not finish"
    if errors:
        raise errors[0]
    return results


ROOMY_CARD = {"version": "1", "capabilities": [{"id": "summarize", "version": "1"}],
              "maxConcurrency": 1000}


class Cast:
    """A Group with a coordinator, `workers` workers and a root Mission."""

    def __init__(self, slug: str, workers: int = WORKERS):
        self.world = World(slug)
        self.group_id = self.world.group.id
        self.c = self.world.agent(f"c-{slug}", roles=("coordinator",))
        # Winners pile up owned items round after round; the maxConcurrency backstop on
        # acceptance is not what these races are about, so the cards leave room for them.
        self.workers = [self.world.agent(f"w{n}-{slug}", card=ROOMY_CARD)
                        for n in range(1, workers + 1)]
        owner = self.world.human(f"owner-{slug}")
        self.mission_id = self.c.ok("mission.create", {
            "title": "Races", "ownerId": owner.principal,
            "coordinatorId": self.c.principal})[0]["missionId"]

    def authorize(self) -> str:
        # Enough attempts and no backoff, so that a failed round can be offered again at once.
        retry = {"maxAttempts": 100, "backoff": {"strategy": "fixed", "initialSeconds": 0,
                                                 "maxSeconds": 0}}
        return self.c.ok("work.authorize", {"missionId": self.mission_id,
                                            "contract": contract(retry=retry)})[0]["workItemId"]

    def offer_urgently(self, item_id: str, workers) -> None:
        self.c.ok("work.offer", {"candidates": [w.name for w in workers], "mode": "urgent",
                                 "expiresAt": format_time(now() + timedelta(seconds=600))},
                  workItemId=item_id)

    def race_to_accept(self, item_id: str) -> tuple:
        """Every worker accepts at once: (winner, its answer, [(loser, status, body)])."""
        envelopes = [w.envelope("work.accept_offer", {"contractRevision": 1},
                                workItemId=item_id) for w in self.workers]
        before = self.world.head
        results = race([lambda w=w, e=e: post(w.token, self.group_id, e)
                        for w, e in zip(self.workers, envelopes)])
        winners = [(w, body) for w, (status, body) in zip(self.workers, results)
                   if status == 200]
        assert len(winners) == 1, [status for status, _ in results]
        winner, answer = winners[0]
        losers = [(w, status, body) for w, (status, body) in zip(self.workers, results)
                  if w is not winner]
        assert self.world.head == before + len(answer["events"])
        return winner, answer, losers


def check_first_acceptance_won(cast: Cast, item_id: str, winner, answer, losers) -> int:
    """One winner, the others OFFER_NOT_LIVE, and the losers' offers withdrawn by the
    winning command itself. Returns the winner's ownership epoch."""
    for loser, status, body in losers:
        assert (status, body["error"]["code"]) == (409, "OFFER_NOT_LIVE"), (loser.name, body)
    loser_names = sorted(loser.name for loser, _, _ in losers)
    accepted, withdrawn = answer["events"]
    assert accepted["type"] == "work.offer_accepted"
    assert accepted["data"]["agentId"] == winner.name
    assert sorted(accepted["data"]["withdrawn"]) == loser_names
    assert withdrawn["type"] == "work.offer_withdrawn"
    assert sorted(withdrawn["data"]["agentIds"]) == loser_names
    assert withdrawn["commandId"] == accepted["commandId"] == answer["commandId"]
    assert withdrawn["sequence"] == accepted["sequence"] + 1
    item = cast.c.get(f"work-items/{item_id}").json()
    assert (item["state"], item["owner"]) == ("queued", winner.name)
    assert {o["agentId"]: o["status"] for o in item["offers"]} == {
        w.name: "accepted" if w is winner else "withdrawn" for w in cast.workers}
    return accepted["data"]["ownershipEpoch"]


def test_first_acceptance_wins_an_item_offered_again_and_again():
    """20 rounds on one WorkItem: offered urgently to 8 workers, all accept at once,
    then the coordinator fails it so it can be offered again."""
    cast = Cast("race-same")
    item_id = cast.authorize()
    epochs = []
    for _ in range(ROUNDS):
        cast.offer_urgently(item_id, cast.workers)
        winner, answer, losers = cast.race_to_accept(item_id)
        epochs.append(check_first_acceptance_won(cast, item_id, winner, answer, losers))
        cast.c.ok("work.fail", {"evidence": [evidence(["ac1"], producer=cast.c.principal,
                                                      result="reassigning")]},
                  workItemId=item_id)
    assert epochs == list(range(1, ROUNDS + 1))
    assert verify_group(cast.group_id) == []


def test_first_acceptance_wins_on_fresh_items():
    cast = Cast("race-fresh")
    for _ in range(ROUNDS):
        item_id = cast.authorize()
        cast.offer_urgently(item_id, cast.workers)
        winner, answer, losers = cast.race_to_accept(item_id)
        assert check_first_acceptance_won(cast, item_id, winner, answer, losers) == 1
    assert verify_group(cast.group_id) == []


def test_the_same_command_id_from_two_threads_appends_once():
    """Accepted: one append, the other answer is the same with duplicate: true.
    Rejected: the identical rejection twice, nothing appended."""
    cast = Cast("race-dup", workers=1)
    worker = cast.workers[0]
    for round_ in range(10):
        item_id = cast.authorize()
        cast.offer_urgently(item_id, [worker])
        revision = 1 if round_ % 2 == 0 else 2  # odd rounds: CONTRACT_REVISION_MISMATCH
        envelope = worker.envelope("work.accept_offer", {"contractRevision": revision},
                                   workItemId=item_id)
        before = cast.world.head
        first, second = race([partial(post, worker.token, cast.group_id, envelope)] * 2)
        assert first[0] == second[0]
        if revision == 1:
            assert first[0] == 200
            assert sorted([first[1]["duplicate"], second[1]["duplicate"]]) == [False, True]
            assert first[1]["events"] == second[1]["events"]
            assert cast.world.head == before + len(first[1]["events"])
        else:
            assert first == second
            assert first[1]["error"]["code"] == "CONTRACT_REVISION_MISMATCH"
            assert cast.world.head == before
    assert verify_group(cast.group_id) == []


def test_different_groups_never_contend():
    """While one Group's row is locked, commands in three other Groups all complete;
    then all four Groups take a concurrent burst, and every sequence is gapless."""
    casts = [Cast(f"race-g{n}", workers=0) for n in range(4)]

    def authorize_many(cast, count):
        def call():
            return [post(cast.c.token, cast.group_id, cast.c.envelope(
                "work.authorize", {"missionId": cast.mission_id, "contract": contract()}))
                for _ in range(count)]
        return call

    # Group 0 is locked by this thread; the others must not wait for it.
    with transaction.atomic():
        Group.objects.select_for_update().get(id=casts[0].group_id)
        results = race([authorize_many(cast, 5) for cast in casts[1:]], timeout=30)
    assert all(status == 200 for answers in results for status, _ in answers)

    # A burst: two clients per Group, all Groups at once.
    results = race([authorize_many(cast, 10) for cast in casts for _ in range(2)])
    assert all(status == 200 for answers in results for status, _ in answers)
    for cast in casts:
        sequences = list(Event.objects.filter(group_id=cast.group_id)
                         .order_by("sequence").values_list("sequence", flat=True))
        assert sequences == list(range(1, len(sequences) + 1))
        assert cast.world.head == len(sequences)
        assert verify_group(cast.group_id) == []
