"""The OpenAPI document's commands: every command type has a named schema, a discriminator
mapping entry and an example (apps/api/examples.py), and the server accepts each example.

The examples tell one story with made-up ids; here a real Group is built with those people
(a coordinator, a worker, a reviewer and a human owner, and a second Group to forward into),
and for each command a fresh Mission holds a WorkItem in the state the command acts on. The
example's ids are replaced by the real ones, its times moved to now, its signed body and
envelope signed with the real keys, and it is posted: 200."""

import json
import re
import uuid
from datetime import UTC, datetime

import pytest
from django.test import Client

from apps.api import examples
from apps.api.openapi import pascal
from apps.artifacts.models import Artifact
from apps.identity import registry
from mission_weave.core.commands import COMMAND_TYPES
from mission_weave.protocol.canonical import sign
from mission_weave.protocol.timefmt import format_time, parse_time
from tests.hostile.cast import BUSY_CARD, Stage
from tests.integration.artifact_helpers import upload
from tests.integration.test_openapi import (
    COMMANDS_PATH,
    COMPONENTS,
    json_schema,
    resolve,
    validator,
)
from tests.support import World

# What each command acts on: a WorkItem in this state of a fresh Mission, "approvable" (a
# Mission whose one WorkItem is verified), "mission" (a fresh Mission) or nothing.
ACTS_ON = {
    "mission.create": None, "mission.create_child": "open", "mission.approve": "approvable",
    "mission.refuse_approval": "approvable", "mission.fail": "mission",
    "mission.cancel": "mission", "work.propose": "mission", "work.authorize": "mission",
    "work.revise_contract": "open", "work.offer": "open", "work.decline_offer": "offered",
    "work.accept_offer": "offered", "approval.grant_execution": "approval",
    "approval.refuse_execution": "approval", "work.start": "queued", "lease.renew": "active",
    "work.progress": "active", "work.checkpoint": "active", "work.block": "active",
    "work.unblock": "blocked", "work.submit": "active", "work.accept_result": "submitted",
    "evidence.record": "submitted", "work.fail": "active", "work.cancel": "open",
    "work.request_preemption": "active", "conversation.post": "offered",
    "artifact.publish": "active", "context.publish": "active",
    "artifact.approve_forwarding": "active", "artifact.forward": "active",
    "capability.rotate": "active", "capability.narrow": "active", "usage.record": "active",
    "schedule.disclose": "queued",
}
WIRE_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


# --- the document -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def document(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        response = Client().get("/api/v1/schema/?format=json")
    assert response.status_code == 200, response.content[:300]
    return response.json()


def test_every_command_type_has_a_named_schema_a_mapping_entry_and_an_example(document):
    envelope = resolve(document, json_schema(
        document["paths"][COMMANDS_PATH]["post"]["requestBody"]["content"]))
    mapping = envelope["discriminator"]["mapping"]
    offered = document["paths"][COMMANDS_PATH]["post"]["requestBody"]["content"][
        "application/json"]["examples"]
    assert set(ACTS_ON) == set(COMMAND_TYPES) == set(mapping) == set(offered)
    whole = validator(document, "CommandEnvelope")
    for command_type in COMMAND_TYPES:
        name = pascal(command_type) + "Command"
        assert mapping[command_type] == COMPONENTS + name
        schema = document["components"]["schemas"][name]
        assert schema["properties"]["type"] == {"type": "string", "enum": [command_type]}
        [example] = schema["examples"]
        assert example == offered[command_type]["value"] == examples.example(command_type)
        assert example["type"] == command_type
        problems = [f"{list(e.absolute_path)}: {e.message}"
                    for e in validator(document, name).iter_errors(example)]
        assert problems == [], (command_type, problems)
        assert not list(whole.iter_errors(example)), command_type  # exactly one variant


# --- the server -----------------------------------------------------------------------------------

class People:
    """The examples' people as members of a real Group, and a second Group to forward into."""

    def __init__(self):
        self.world = World()
        tag = self.world.group.slug
        self.coordinator = self.world.agent(f"coord-{tag}", roles=("coordinator",))
        self.worker = self.world.agent(f"wkr-{tag}", card=BUSY_CARD)
        self.reviewer = self.world.agent(f"rev-{tag}", roles=("reviewer",))
        self.owner = self.world.human(f"own-{tag}", roles=("owner",))
        self.board = World()
        registry.add_member(self.board.group, self.coordinator.principal, ["coordinator"])
        self.by_principal = {examples.COORDINATOR: self.coordinator, examples.WORKER: self.worker,
                             examples.REVIEWER: self.reviewer, examples.OWNER: self.owner}

    def mission(self) -> Stage:
        stage = Stage(self.world, self.coordinator, self.worker, self.owner)
        [created] = self.coordinator.ok("mission.create", {
            "title": "Q3 board pack", "ownerId": self.owner.principal,
            "coordinatorId": self.coordinator.principal})
        stage.mission_id, stage.created_sequence = created["missionId"], created["sequence"]
        return stage


def real_names(people: People, stage: Stage | None, item_id: str | None) -> dict:
    """The examples' names -> this Group's."""
    names = {examples.GROUP: people.world.group.id, examples.OTHER_GROUP: people.board.group.id,
             "coordinator-1": people.coordinator.name, "worker-7": people.worker.name,
             "reviewer-2": people.reviewer.name, examples.OWNER: people.owner.principal,
             examples.PACKAGE: f"pkg-{uuid.uuid4().hex[:8]}"}
    if stage is not None:
        names[examples.MISSION] = stage.mission_id
    if item_id is not None:
        names[examples.WORK_ITEM] = item_id
        item = stage.item(item_id)
        if item["lease"]:
            names[examples.LEASE] = item["lease"]["id"]
        published = Artifact.objects.filter(group_id=people.world.group.id,
                                            work_item_id=item_id).first()
        if published is not None:
            names[examples.DELIVERABLE_HASH] = published.hash
    return names


def renamed(value, names: dict):
    pattern = re.compile("|".join(re.escape(name) for name in sorted(names, key=len,
                                                                        reverse=True)))
    return json.loads(pattern.sub(lambda found: names[found.group(0)], json.dumps(value)))


def moved(value, delta):
    """Every wire timestamp moved by `delta` (the examples' times kept relative to now)."""
    if isinstance(value, dict):
        return {key: moved(item, delta) for key, item in value.items()}
    if isinstance(value, list):
        return [moved(item, delta) for item in value]
    if isinstance(value, str) and WIRE_TIME.match(value):
        return format_time(parse_time(value) + delta)
    return value


def prepared(people: People, command_type: str) -> tuple:
    """(sender, the example as the server should accept it) on a fresh stage."""
    example = examples.example(command_type)
    sender = people.by_principal[example["actor"]]
    acts_on, stage, item_id = ACTS_ON[command_type], None, None
    if acts_on is not None:
        stage = people.mission()
        if acts_on == "approvable":
            item_id = stage._item_in("verified")
        elif acts_on != "mission":
            item_id = stage._item_in(acts_on)
    delta = datetime.now(UTC) - parse_time(examples.EXAMPLE_NOW)
    names = real_names(people, stage, item_id)
    if command_type == "artifact.publish":  # the example's own bytes, uploaded first
        upload(people.worker, examples.DELIVERABLE)
        names.pop(examples.DELIVERABLE_HASH, None)
    envelope = moved(renamed(example, names), delta)
    envelope["membershipEpoch"] = sender.membership_epoch
    if "sessionEpoch" in envelope:
        envelope["sessionEpoch"] = sender.session_epoch
    if "ownershipEpoch" in envelope:
        envelope["ownershipEpoch"] = stage.epoch(item_id)
    if command_type == "context.publish":  # the Mission's own events, so far
        envelope["body"]["sourceEvents"] = {"from": stage.created_sequence,
                                            "to": people.world.head}
    if command_type == "artifact.forward":  # forwarding takes the owner's approval first
        people.owner.ok("artifact.approve_forwarding", {
            "hash": envelope["body"]["hash"], "targetGroupId": people.board.group.id})
    if command_type in examples.SIGNED_BODIES:
        signer = people.by_principal["agent:" + examples.SIGNED_BODIES[command_type]]
        envelope["body"] = sign(envelope["body"], signer.key, signer.key_id)
    if sender.key is not None:
        envelope = sign(envelope, sender.key, sender.key_id)
    return sender, envelope


@pytest.mark.usefixtures("blob_root")
def test_the_server_accepts_every_commands_example(db):
    people = People()
    refused = {}
    for command_type in COMMAND_TYPES:
        sender, envelope = prepared(people, command_type)
        response = sender.post(envelope)
        if response.status_code != 200:
            refused[command_type] = (response.status_code, response.json())
        else:
            assert response.json()["events"], command_type
    assert refused == {}
