"""Reads (PROTOCOL §2 "Reads", §3, §4, §1 authority key) through the HTTP API.

WorkItem and Mission documents carry every key PROTOCOL lists; the events feed pages
by `after`/`limit` with `headSequence` and a verifiable hash chain; a non-member gets
NOT_A_MEMBER on every read and learns nothing; the authority key and the OpenAPI
document are public.
"""

import re

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.test import Client

from apps.identity import registry
from mission_weave.protocol.canonical import ZERO_HASH, b64url_decode, content_hash, without
from mission_weave.protocol.timefmt import parse_time
from tests.support import World, assert_error, contract, now

WORK_ITEM_KEYS = {"id", "missionId", "state", "revision", "contractRevision", "contract",
                  "ownershipEpoch", "owner", "startBy", "lease", "dependsOn"}
MISSION_KEYS = {"id", "title", "state", "ownerId", "coordinatorId", "parentWorkItemId",
                "workItems"}
EVENT_KEYS = {"id", "groupId", "sequence", "type", "occurredAt", "actor", "commandId",
              "missionId", "workItemId", "revision", "data", "prevHash", "hash"}
RFC3339_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
B64URL = re.compile(r"^[A-Za-z0-9_-]+$")


@pytest.fixture
def s(scenario):
    return scenario




def is_time(text) -> bool:
    return isinstance(text, str) and bool(RFC3339_Z.match(text))


def feed(actor, query: str = ""):
    response = actor.get(f"events{query}")
    assert response.status_code == 200, response.json()
    return response.json()


# --- WorkItem ---------------------------------------------------------------------------------

def test_an_open_work_item_has_every_listed_key(s):
    item_id = s.authorize()
    response = s.c.get(f"work-items/{item_id}")
    assert response.status_code == 200
    item = response.json()
    assert set(item) >= WORK_ITEM_KEYS, WORK_ITEM_KEYS - set(item)
    assert item["id"] == item_id and item["missionId"] == s.mission_id
    assert item["state"] == "open"
    assert item["contractRevision"] == 1 and item["contract"]["revision"] == 1
    assert item["contract"] == {**contract(), "revision": 1}
    assert item["ownershipEpoch"] == 0
    assert item["owner"] is None and item["startBy"] is None and item["lease"] is None
    assert item["dependsOn"] == []
    assert isinstance(item["revision"], int) and item["revision"] >= 1


def test_a_queued_work_item_has_an_owner_and_a_start_by(s):
    item_id = s.authorize()
    s.offer(item_id)
    accepted = s.accept(item_id)
    item = s.item(item_id)
    assert item["state"] == "queued"
    assert item["owner"] in (s.w1.name, s.w1.principal)
    assert item["ownershipEpoch"] == accepted["ownershipEpoch"] == 1
    assert is_time(item["startBy"]) and item["startBy"] == accepted["startBy"]
    assert item["lease"] is None


def test_an_active_work_item_shows_its_lease(s):
    item_id, started = s.running()
    item = s.item(item_id)
    assert set(item) >= WORK_ITEM_KEYS
    assert item["state"] == "active"
    assert {"id", "expiresAt"} <= set(item["lease"])
    assert item["lease"]["id"] == started["leaseId"]
    assert item["lease"]["expiresAt"] == started["expiresAt"] and is_time(started["expiresAt"])
    assert parse_time(item["lease"]["expiresAt"]) > now()
    assert item["ownershipEpoch"] == started["ownershipEpoch"]


def test_the_revision_grows_with_each_event_on_the_item(s):
    item_id = s.authorize()
    first = s.item(item_id)["revision"]
    s.offer(item_id)
    assert s.item(item_id)["revision"] == first + 1
    s.accept(item_id)
    assert s.item(item_id)["revision"] == first + 2


def test_depends_on_lists_the_dependencies(s):
    a = s.authorize()
    b = s.authorize(dependencies={"workItems": [a], "policy": "all_verified"})
    assert s.item(b)["dependsOn"] == [a]
    assert s.item(a)["dependsOn"] == []


def test_the_work_item_list_filters_by_mission_and_state(s):
    a = s.authorize()
    b = s.authorize()
    s.offer(b)
    listed = s.c.get(f"work-items?missionId={s.mission_id}").json()["workItems"]
    assert {i["id"] for i in listed} == {a, b}
    assert all(set(i) >= WORK_ITEM_KEYS for i in listed)
    assert [i["id"] for i in s.c.get("work-items?state=offered").json()["workItems"]] == [b]
    assert s.c.get("work-items?missionId=msn_other").json()["workItems"] == []


# --- Mission -----------------------------------------------------------------------------------

def test_a_mission_has_every_listed_key(s):
    a = s.authorize()
    b = s.authorize()
    response = s.c.get(f"missions/{s.mission_id}")
    assert response.status_code == 200
    mission = response.json()
    assert set(mission) >= MISSION_KEYS, MISSION_KEYS - set(mission)
    assert mission["id"] == s.mission_id and mission["title"] == "Q3 review"
    assert mission["state"] == "active"
    assert mission["ownerId"] == s.owner.principal
    assert mission["coordinatorId"] == s.c.principal
    assert mission["parentWorkItemId"] is None
    assert mission["workItems"] == [a, b]


def test_a_child_mission_names_its_parent_work_item(s):
    item_id = s.authorize()
    events = s.c.ok("mission.create_child", {"title": "Deeper dive", "childFailurePolicy": "block"},
                    workItemId=item_id)
    child_id = next(e["data"]["childMissionId"] for e in events
                    if e["type"] == "mission.child_created")
    child = s.c.get(f"missions/{child_id}").json()
    assert set(child) >= MISSION_KEYS
    assert child["parentWorkItemId"] == item_id and child["workItems"] == []
    assert child["ownerId"] == s.owner.principal and child["coordinatorId"] == s.c.principal
    assert s.item(item_id)["state"] == "blocked"
    listed = s.c.get("missions").json()["missions"]
    assert {m["id"] for m in listed} == {s.mission_id, child_id}


# --- the events feed ---------------------------------------------------------------------------

def test_the_events_feed_pages_by_after_and_limit(s):
    for _ in range(3):
        s.offer(s.authorize())
    head = s.world.head
    assert head >= 7
    seen, after = [], 0
    while True:
        page = feed(s.c, f"?after={after}&limit=2")
        assert page["headSequence"] == head
        assert len(page["events"]) <= 2
        if not page["events"]:
            break
        seen += page["events"]
        after = page["events"][-1]["sequence"]
    assert [e["sequence"] for e in seen] == list(range(1, head + 1))
    everything = feed(s.c)
    assert everything["events"] == seen and everything["headSequence"] == head
    assert feed(s.c, f"?after={head}") == {"events": [], "headSequence": head}
    assert feed(s.c, f"?after={head + 50}")["events"] == []
    assert [e["sequence"] for e in feed(s.c, "?after=3&limit=1")["events"]] == [4]
    assert len(feed(s.c, "?limit=1000")["events"]) == head


def test_the_events_feed_is_a_verifiable_hash_chain(s):
    item_id = s.authorize()
    s.offer(item_id)
    events = feed(s.c)["events"]
    previous = ZERO_HASH
    for event in events:
        assert set(event) == EVENT_KEYS
        assert event["groupId"] == s.world.group.id
        assert event["prevHash"] == previous
        assert event["hash"] == content_hash(without(event, "hash"))
        assert re.match(r"^sha256:[0-9a-f]{64}$", event["hash"])
        assert is_time(event["occurredAt"])
        previous = event["hash"]
    assert [e["type"] for e in events] == ["mission.created", "work.authorized", "work.offered"]
    offered = events[-1]
    assert offered["actor"] == s.c.principal and offered["workItemId"] == item_id
    assert {"agentId", "expiresAt", "rank", "selectionBasis"} <= set(offered["data"]["offers"][0])


def test_the_events_feed_of_an_empty_group(db):
    world = World()
    agent = world.agent("solo-" + world.group.slug, roles=("observer",))
    assert feed(agent) == {"events": [], "headSequence": 0}


@pytest.mark.parametrize("query", ["?limit=0", "?limit=1001", "?after=-1", "?limit=abc"])
def test_the_events_feed_refuses_bad_paging(s, query):
    assert_error(s.c.get(f"events{query}"), 400, "VALIDATION_ERROR")


# --- non-members -------------------------------------------------------------------------------

def _read_paths(s, item_id):
    return ["events", "events?after=0&limit=5", "work-items",
            f"work-items?missionId={s.mission_id}", f"work-items/{item_id}",
            f"work-items/{item_id}/audit", "work-items/wi_missing",
            "work-items/wi_missing/audit", "missions", f"missions/{s.mission_id}",
            "missions/msn_missing"]


def test_a_non_member_agent_gets_not_a_member_on_every_read(s):
    item_id = s.authorize()
    outsider = World().agent("peek-" + s.world.group.slug, roles=("coordinator",))
    answers = []
    for path in _read_paths(s, item_id):
        for group_id in (s.world.group.id, "grp_no-such-group"):
            response = outsider.client.get(f"/api/v1/groups/{group_id}/{path}",
                                           HTTP_AUTHORIZATION=f"Bearer {outsider.token}")
            assert_error(response, 403, "NOT_A_MEMBER")
            answers.append(response.content)
    assert len(set(answers)) == 1, "the answer must not depend on the Group or the object"
    assert s.world.group.id.encode() not in answers[0] and item_id.encode() not in answers[0]


def test_a_non_member_human_gets_not_a_member_on_every_read(s):
    item_id = s.authorize()
    registry.create_user("nosy-" + s.world.group.slug, "pw")
    client = Client()
    client.login(username="nosy-" + s.world.group.slug, password="pw")
    for path in _read_paths(s, item_id):
        response = client.get(f"/api/v1/groups/{s.world.group.id}/{path}")
        assert_error(response, 403, "NOT_A_MEMBER")


def test_a_removed_member_gets_not_a_member(s):
    item_id = s.authorize()
    assert s.w2.get(f"work-items/{item_id}").status_code == 200
    registry.remove_member(s.world.group, s.w2.principal)
    for path in _read_paths(s, item_id):
        assert_error(s.w2.get(path), 403, "NOT_A_MEMBER")


def test_members_of_every_role_may_read(s):
    item_id = s.authorize()
    observer = s.world.agent("obs-" + s.world.group.slug, roles=("observer",))
    for actor in (s.c, s.w1, s.owner, observer):
        assert actor.get(f"work-items/{item_id}").status_code == 200
        assert actor.get(f"missions/{s.mission_id}").status_code == 200
        assert actor.get("events").status_code == 200


def test_reads_without_credentials_are_unauthenticated(s):
    item_id = s.authorize()
    for path in _read_paths(s, item_id):
        assert_error(Client().get(f"/api/v1/groups/{s.world.group.id}/{path}"),
                     401, "UNAUTHENTICATED")


# --- the audit trail ---------------------------------------------------------------------------

def test_the_audit_trail_lists_the_items_events_and_refused_commands(s):
    item_id = s.authorize()
    s.offer(item_id)
    refused = s.w2.envelope("work.accept_offer", {"contractRevision": 1}, workItemId=item_id)
    assert s.w2.post(refused).status_code == 409
    audit = s.c.get(f"work-items/{item_id}/audit").json()
    assert [e["type"] for e in audit["events"]] == ["work.authorized", "work.offered"]
    assert all(e["workItemId"] == item_id for e in audit["events"])
    [record] = audit["refusedCommands"]
    assert record["commandId"] == refused["id"] and record["actor"] == s.w2.principal
    assert record["error"]["code"] == "OFFER_NOT_LIVE" and record["status"] == 409
    assert record["command"] == refused and is_time(record["at"])


# --- public documents --------------------------------------------------------------------------

def test_the_authority_key_is_32_bytes_of_base64url(db):
    response = Client().get("/api/v1/authority")
    assert response.status_code == 200
    keys = response.json()["keys"]
    assert keys and all(set(k) >= {"keyId", "publicKey"} for k in keys)
    for key in keys:
        assert isinstance(key["keyId"], str) and key["keyId"]
        assert B64URL.match(key["publicKey"]), "base64url without padding"
        raw = b64url_decode(key["publicKey"])
        assert len(raw) == 32
        Ed25519PublicKey.from_public_bytes(raw)


def test_the_openapi_document_lists_the_command_endpoint(db):
    response = Client().get("/api/v1/schema/?format=json")
    assert response.status_code == 200, response.content[:300]
    document = response.json()
    assert document["openapi"].startswith("3.")
    commands = [path for path in document["paths"] if path.endswith("/commands")]
    assert commands == ["/api/v1/groups/{group_id}/commands"]
    assert "post" in document["paths"][commands[0]]
    for path in ("/api/v1/sessions", "/api/v1/authority", "/api/v1/groups/{group_id}/events",
                 "/api/v1/groups/{group_id}/work-items/{work_item_id}",
                 "/api/v1/groups/{group_id}/missions/{mission_id}"):
        assert path in document["paths"], path


def test_the_openapi_document_is_yaml_by_default(db):
    response = Client().get("/api/v1/schema/")
    assert response.status_code == 200
    assert b"openapi:" in response.content and b"/commands" in response.content

