"""Test helpers: a Group with signed-in agents and humans, speaking the wire protocol
through Django's test client (the whole HTTP stack: URLs, middleware, views)."""

import itertools
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.test import Client

from apps.identity import registry
from apps.identity.models import Membership
from apps.ledger.models import Group
from mission_weave.protocol.canonical import public_key_b64url, sign
from mission_weave.protocol.timefmt import format_time
from tests.samples import contract  # re-exported for the tests

_counter = itertools.count(1)


def now() -> datetime:
    return datetime.now(UTC)


def evidence(criteria, producer=None, **overrides) -> dict:
    """An Evidence record; its producer is the Actor that sends it (filled in by
    Actor.envelope) unless the test names another."""
    record = {"id": f"ev-{next(_counter)}", "subject": "deliverable:summary",
              "criteria": list(criteria), "method": "self-check", "result": "pass",
              "producer": producer, "timestamp": format_time(now()), "artifacts": []}
    record.update(overrides)
    return record


@dataclass
class Actor:
    """A member of the test Group: an agent (signing key, bearer token) or a human."""

    principal: str
    client: Client
    world: "World"
    key: Ed25519PrivateKey | None = None
    key_id: str | None = None
    token: str | None = None
    session_epoch: int | None = None
    last: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.principal.split(":", 1)[1]

    @property
    def membership_epoch(self) -> int:
        return Membership.objects.get(group_id=self.world.group.id, principal=self.principal).epoch

    def open_session(self, **overrides) -> dict:
        request = {"agentId": self.name, "keyId": self.key_id, "nonce": uuid.uuid4().hex,
                   "issuedAt": format_time(now())}
        request.update(overrides)
        response = self.client.post("/api/v1/sessions", sign(request, self.key, self.key_id),
                                    content_type="application/json")
        body = response.json()
        if response.status_code == 201:
            self.token, self.session_epoch = body["token"], body["sessionEpoch"]
        return response

    def envelope(self, type_: str, body: dict, **fields) -> dict:
        if isinstance(body, dict) and isinstance(body.get("evidence"), list):
            body = {**body, "evidence": [
                {**r, "producer": r.get("producer") or self.principal}
                if isinstance(r, dict) else r for r in body["evidence"]]}
        envelope = {"id": fields.pop("id", None) or f"cmd-{uuid.uuid4().hex}", "type": type_,
                    "groupId": self.world.group.id, "actor": self.principal,
                    "issuedAt": format_time(now()), "membershipEpoch": self.membership_epoch,
                    "body": body}
        if self.key is not None:
            envelope["sessionEpoch"] = self.session_epoch
        envelope.update({k: v for k, v in fields.items() if v is not None})
        if self.key is not None:
            envelope = sign(envelope, self.key, self.key_id)
        return envelope

    def post(self, envelope: dict, group_id: str | None = None):
        group_id = group_id or self.world.group.id
        headers = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"} if self.token else {}
        return self.client.post(f"/api/v1/groups/{group_id}/commands", json.dumps(envelope),
                                content_type="application/json", **headers)

    def send(self, type_: str, body: dict | None = None, **fields):
        """Sign and submit a command; returns the response."""
        response = self.post(self.envelope(type_, body or {}, **fields))
        self.last = response.json()
        return response

    def ok(self, type_: str, body: dict | None = None, **fields) -> list:
        response = self.send(type_, body, **fields)
        assert response.status_code == 200, response.json()
        return response.json()["events"]

    def get(self, path: str):
        headers = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"} if self.token else {}
        return self.client.get(f"/api/v1/groups/{self.world.group.id}/{path}", **headers)


class World:
    """One Group with a coordinator, workers and a human MissionOwner."""

    def __init__(self, slug: str | None = None):
        self.group, _ = registry.create_group(slug or f"g{uuid.uuid4().hex[:10]}")

    def agent(self, name: str, roles=("worker",), card: dict | None = None) -> Actor:
        key = Ed25519PrivateKey.generate()
        agent_key = registry.register_agent(name, public_key_b64url(key), card or {
            "version": "1", "capabilities": [{"id": "summarize", "version": "1"}],
            "maxConcurrency": 4})
        registry.add_member(self.group, f"agent:{name}", list(roles))
        actor = Actor(f"agent:{name}", Client(), self, key=key, key_id=agent_key.key_id)
        assert actor.open_session().status_code == 201
        return actor

    def human(self, username: str, roles=("owner",)) -> Actor:
        registry.create_user(username, "pw")
        registry.add_member(self.group, f"user:{username}", list(roles))
        client = Client(enforce_csrf_checks=False)
        client.login(username=username, password="pw")
        return Actor(f"user:{username}", client, self)

    @property
    def head(self) -> int:
        return Group.objects.get(id=self.group.id).head_sequence


class Scenario:
    """The usual cast: coordinator c, workers w1/w2, owner (human), one Mission."""

    def __init__(self, slug: str | None = None):
        self.world = World(slug)
        self.c = self.world.agent("c-" + self.world.group.slug, roles=("coordinator",))
        self.w1 = self.world.agent("w1-" + self.world.group.slug)
        self.w2 = self.world.agent("w2-" + self.world.group.slug)
        self.owner = self.world.human("owner-" + self.world.group.slug)
        events = self.c.ok("mission.create", {"title": "Q3 review", "ownerId": self.owner.principal,
                                              "coordinatorId": self.c.principal})
        self.mission_id = events[0]["missionId"]

    def coordinated_by(self, coordinator: "Actor") -> str:
        """From here on, the Scenario works in a new Mission whose Coordinator is
        `coordinator` (a Mission's commands are its coordinator's), with the agent
        coordinator c as its delegate for the planning the helpers do."""
        events = self.c.ok("mission.create", {
            "title": "Q3 review", "ownerId": self.owner.principal,
            "coordinatorId": coordinator.principal, "delegates": [self.c.principal]})
        self.mission_id = events[0]["missionId"]
        return self.mission_id

    def in_child_mission(self, parent_item: str) -> str:
        """From here on, the Scenario works in a new child Mission of `parent_item`
        (failure policy "block"): its id."""
        self.mission_id = self.c.ok("mission.create_child", {
            "title": "Figures", "childFailurePolicy": "block"},
            workItemId=parent_item)[-1]["data"]["childMissionId"]
        return self.mission_id

    def authorize(self, **contract_overrides) -> str:
        events = self.c.ok("work.authorize", {"missionId": self.mission_id,
                                              "contract": contract(**contract_overrides)})
        return events[0]["workItemId"]

    def offer(self, item_id: str, *workers, mode="sequential", seconds=600) -> list:
        names = [w.name for w in workers] or [self.w1.name]
        expires_at = format_time(now() + timedelta(seconds=seconds))
        return self.c.ok("work.offer", {"candidates": names, "mode": mode,
                                        "expiresAt": expires_at}, workItemId=item_id)

    def accept_result(self, item_id: str, **overrides) -> list:
        """The Coordinator accepts with Evidence of their own for every criterion (an
        override when the review has not run, as in tests without a Celery worker)."""
        criteria = [c["id"] for c in self.item(item_id)["contract"]["acceptanceCriteria"]]
        return self.c.ok("work.accept_result", {"evidence": [evidence(
            criteria, method="coordinator-review", result="pass: checked it myself",
            **overrides)]}, workItemId=item_id)

    def deliver(self, item_id: str, worker=None, data: bytes | None = None) -> str:
        """The lease holder (default w1) uploads a deliverable and publishes its signed
        manifest, as a submission must cite (§13.1): its hash."""
        from tests.integration.artifact_helpers import published  # it imports this module

        data = data or f"# The summary of {item_id}\n".encode()
        return published(self, item_id, data, worker=worker or self.w1)

    def item(self, item_id: str) -> dict:
        return self.c.get(f"work-items/{item_id}").json()

    def accept(self, item_id: str, worker=None) -> dict:
        worker = worker or self.w1
        events = worker.ok("work.accept_offer", {"contractRevision": self.item(item_id)[
            "contractRevision"]}, workItemId=item_id)
        return events[0]["data"]

    def start(self, item_id: str, worker=None) -> dict:
        worker = worker or self.w1
        item = self.item(item_id)
        return worker.ok("work.start", {}, workItemId=item_id,
                         ownershipEpoch=item["ownershipEpoch"])[0]["data"]

    def queued(self, worker=None, **contract_overrides) -> str:
        """An item offered to and accepted by `worker` (default w1), not yet started."""
        worker = worker or self.w1
        item_id = self.authorize(**contract_overrides)
        self.offer(item_id, worker)
        self.accept(item_id, worker)
        return item_id

    def running(self, worker=None, **contract_overrides) -> tuple[str, dict]:
        """An item offered to, accepted and started by `worker`: (item id, started data)."""
        worker = worker or self.w1
        item_id = self.queued(worker, **contract_overrides)
        return item_id, self.start(item_id, worker)

    def lease_fields(self, item_id: str) -> dict:
        item = self.item(item_id)
        return {"workItemId": item_id, "ownershipEpoch": item["ownershipEpoch"],
                "leaseId": item["lease"]["id"] if item["lease"] else None}


def later(clock, seconds: float) -> None:
    """Move the stopped clock (the `clock` fixture) on by `seconds`."""
    clock.shift(timedelta(seconds=seconds))


def events_after(s: "Scenario", head: int) -> list:
    """The Group's events after sequence `head`, read as the coordinator."""
    response = s.c.get(f"events?after={head}")
    assert response.status_code == 200, response.json()
    return response.json()["events"]


def assert_error(response, status: int, code: str) -> dict:
    """The PROTOCOL error envelope with this status and code; returns `error`."""
    assert response.status_code == status, (response.status_code, response.content[:400])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"].strip(), error
    assert isinstance(error["details"], dict), error
    return error
