"""The schemathesis hook: turn a generated request into one a real principal could send.

Schemathesis generates requests from the OpenAPI document alone, so nearly every one would
stop at authentication: no token, a random Group, an unsigned envelope. `Attacker.map_case`
(registered as the schema's `map_case` hook) draws, per case, whom it comes from and
what it targets, then fills in what a client of the SDK would: the principal's bearer token
(or a human's session cookie and CSRF token), ids of the Cast's Groups, Missions, WorkItems,
artifacts and snapshots, the envelope's actor, epochs and current fencing tokens, and signs
the envelope with the actor's key (sdk/src/mission_weave/protocol/canonical.py, as
sdk/src/mission_weave/sdk/client.py does). Each substitution happens only most of the time, so the
generated value itself still reaches the server in the rest: hostile input in every field,
now behind valid credentials too.

The draws come from one `random.Random(seed)` per run, uniform (a Hypothesis-driven
Random would favour its simplest draws), and the run's seed is printed, so that a run can
be repeated."""

import random
import uuid
from datetime import timedelta

from apps.artifacts import blobs
from apps.work.models import WorkItem
from mission_weave.core.commands import ROLES
from mission_weave.protocol.canonical import sign
from mission_weave.protocol.timefmt import format_time
from tests.hostile.cast import Stage, actor_epoch
from tests.integration.artifact_helpers import digest, manifest
from tests.support import Actor, contract, evidence, now

CSRF = "h" * 32  # a CSRF secret sent as both cookie and header, as a browser form would
COMMANDS_PATH = "/api/v1/groups/{group_id}/commands"
SESSIONS_PATH = "/api/v1/sessions"
BLOBS_PATH = "/api/v1/blobs/{name}"
INTROSPECT_PATH = "/api/v1/capabilities/introspect"


class Attacker:
    def __init__(self, cast, session_agent: Actor, stale_token: str, seed: int):
        self.cast = cast
        self.random = random.Random(seed)
        self.session_agent = session_agent  # the sessions case's agent: nobody else's token
        self.stale_token = stale_token  # a superseded session's token
        # The home Group's Missions: m1's (the matrix's people; `refill` adds more) and m2.
        self.m1_stages, self.m2_stages = [cast.m1], [cast.m2]

    def refill(self) -> None:
        """Another Mission of m1's people with a WorkItem in every state: accepted fuzzed
        commands move WorkItems on (cancelled, failed, verified), and a long run should
        keep finding every state."""
        m1 = self.cast.m1
        self.m1_stages.append(Stage(m1.world, m1.coordinator, m1.worker, m1.owner,
                                    delegates=m1.delegates).build())

    # -- the hook ----------------------------------------------------------------------------

    def map_case(self, context, case):
        return self.fill(case, self.random)

    def fill(self, case, rnd):
        path = case.operation.path
        stage = self._stage(rnd)
        self._path_ids(case, stage, rnd)
        actor = self._actor(case, stage, rnd)
        if path == COMMANDS_PATH and isinstance(case.body, dict):
            case.body = self._envelope(case, case.body, actor, stage, rnd)
        elif path == SESSIONS_PATH and isinstance(case.body, dict):
            case.body = self._session_request(case.body, rnd)
        elif path == BLOBS_PATH and case.method.upper() == "PUT" and isinstance(
                case.body, bytes) and rnd.random() < 0.6:
            case.path_parameters["name"] = digest(case.body)
        elif path == INTROSPECT_PATH and isinstance(case.body, dict) and rnd.random() < 0.6:
            case.body["token"] = rnd.choice([s.capability_token for s in self._all_stages()])
        self._credentials(case, actor, rnd)
        return case

    # -- who --------------------------------------------------------------------------------

    def _stage(self, rnd) -> Stage:
        roll = rnd.random()
        if roll < 0.1:
            return self.cast.mb
        return rnd.choice(self.m2_stages if roll < 0.3 else self.m1_stages)

    def _actor(self, case, stage: Stage, rnd) -> Actor | None:
        """Mostly someone whose role the command needs, of the Mission it targets."""
        cast = self.cast
        everyone = [a for a in cast.principals.values() if a is not None]
        roll = rnd.random()
        if roll < 0.05:
            return None
        if roll < 0.15:
            return rnd.choice([*everyone, cast.worker2, cast.coordinator2, cast.owner2])
        command_type = case.body.get("type") if isinstance(case.body, dict) else None
        needed = ROLES.get(command_type) if isinstance(command_type, str) else None
        if not needed:
            return rnd.choice(everyone)
        people = {"coordinator": [stage.coordinator, *stage.delegates],
                  "owner": [stage.owner], "worker": [stage.worker],
                  "reviewer": [cast.reviewer], "observer": [cast.observer, cast.observer_agent]}
        return rnd.choice([a for role in sorted(needed) for a in people.get(role, [])])

    def _credentials(self, case, actor: Actor | None, rnd) -> None:
        case.headers.pop("Authorization", None)
        case.cookies.pop("sessionid", None)
        roll = rnd.random()
        if roll < 0.04:
            case.headers["Authorization"] = f"Bearer {self.stale_token}"
        elif roll < 0.07:
            case.headers["Authorization"] = f"Bearer {uuid.uuid4().hex}"
        elif actor is None:
            return
        elif actor.token:
            case.headers["Authorization"] = f"Bearer {actor.token}"
        else:
            case.cookies["sessionid"] = actor.client.cookies["sessionid"].value
            case.cookies["csrftoken"] = CSRF
            case.headers["X-CSRFToken"] = CSRF

    # -- what -------------------------------------------------------------------------------

    def _all_stages(self) -> list:
        return [*self.m1_stages, *self.m2_stages, self.cast.mb]

    def _path_ids(self, case, stage: Stage, rnd) -> None:
        params = case.path_parameters
        if "group_id" in params and rnd.random() < 0.9:
            params["group_id"] = stage.world.group.id
        item = rnd.choice(list(stage.items.values()))
        choices = {"work_item_id": [item], "mission_id": [stage.mission_id],
                   "hash": [stage.artifact], "package_id": [stage.package_id],
                   "snapshot_id": [self.cast.snapshot_id, self.cast.b_snapshot_id],
                   "name": [stage.artifact, stage.unpublished_blob]}
        for name, values in choices.items():
            if name in params and rnd.random() < 0.8:
                params[name] = rnd.choice(values)

    def _envelope(self, case, envelope: dict, actor: Actor | None, stage: Stage, rnd) -> dict:
        envelope = dict(envelope)
        group_id = case.path_parameters.get("group_id")
        # Generated ids repeat ("0"), and a repeat is IDEMPOTENCY_MISMATCH before any
        # decision; a generated revision or critical extension ends it as early.
        if rnd.random() < 0.85:
            envelope["id"] = f"fz-{uuid.uuid4().hex}"
        for name in ("expectedRevision", "extensions"):
            if name in envelope and rnd.random() < 0.7:
                del envelope[name]
        item_id = rnd.choice(list(stage.items.values()))
        if actor is not None:
            fields = {"groupId": group_id, "actor": actor.principal,
                      "issuedAt": format_time(now()),
                      "membershipEpoch": actor_epoch(actor, group_id),
                      "sessionEpoch": actor.session_epoch, "workItemId": item_id}
            for name, value in fields.items():
                if value is not None and rnd.random() < 0.92:
                    envelope[name] = value
            if actor.key is None and rnd.random() < 0.9:
                envelope.pop("sessionEpoch", None)
        if isinstance(envelope.get("workItemId"), str) and rnd.random() < 0.7:
            envelope.update(self._fencing(envelope["workItemId"], rnd))
        if isinstance(envelope.get("body"), dict) and rnd.random() < 0.7:
            envelope["body"] = self._body(envelope.get("type"), dict(envelope["body"]), actor,
                                          stage, item_id, rnd)
        if actor is not None and actor.key is not None and rnd.random() < 0.92:
            envelope = signed_if_possible(envelope, actor)
        return envelope

    @staticmethod
    def _fencing(item_id: str, rnd) -> dict:
        if "\x00" in item_id:  # a generated id no WorkItem has (PostgreSQL cannot hold it)
            return {}
        row = WorkItem.objects.filter(work_item_id=item_id).values(
            "ownership_epoch", "lease_id").first()
        if row is None:
            return {}
        fields = {"ownershipEpoch": row["ownership_epoch"], "leaseId": row["lease_id"]}
        return {k: v for k, v in fields.items() if v is not None and rnd.random() < 0.9}

    def _body(self, command_type, body: dict, actor, stage: Stage, item_id: str, rnd) -> dict:
        """Ids the body names, made real; sometimes a whole valid body of the type."""
        principal = actor.principal if actor is not None else "agent:nobody"
        if "missionId" in body or command_type in ("work.propose", "work.authorize"):
            body["missionId"] = stage.mission_id
        if "contract" in body and rnd.random() < 0.5:
            body["contract"] = contract()
        if isinstance(body.get("evidence"), list):
            body["evidence"] = [{**e, "producer": principal} if isinstance(e, dict) else e
                                for e in body["evidence"]] or [evidence(["ac1", "ac2"],
                                                                        producer=principal)]
        later = format_time(now() + timedelta(hours=1))
        valid = {
            "mission.create": {"title": "Fuzzed", "ownerId": stage.owner.principal,
                               "coordinatorId": stage.coordinator.principal},
            "work.offer": {"candidates": [stage.worker.name], "mode": "sequential",
                           "expiresAt": later},
            "work.accept_offer": {"contractRevision": 1},
            "work.submit": {"contractRevision": 1, "artifacts": [],
                            "evidence": [evidence(["ac1", "ac2"], producer=principal)]},
            "work.accept_result": {"evidence": [evidence(["ac1", "ac2"], producer=principal)]},
            "artifact.approve_forwarding": {"hash": stage.artifact,
                                            "targetGroupId": self.cast.other.group.id},
            "artifact.forward": {"hash": stage.artifact,
                                 "targetGroupId": self.cast.other.group.id},
        }
        if command_type in valid and rnd.random() < 0.5:
            body = valid[command_type]
        if command_type == "artifact.publish" and actor is not None and actor.key is not None:
            data = f"fuzzed {rnd.random()}".encode()
            if rnd.random() < 0.5:  # the bytes uploaded first, as a publisher does
                blobs.put(digest(data)[len("sha256:"):], [data], actor.principal, now())
            document = {**manifest(actor, stage.mission_id, item_id, data),
                        "groupId": stage.world.group.id}
            body = signed_if_possible(document, actor) if rnd.random() < 0.8 else body
        if command_type == "context.publish" and actor is not None and actor.key is not None:
            body = {**body, "generator": actor.name,
                    "scope": {"missionId": stage.mission_id}}
            body = signed_if_possible(body, actor)
        return body

    def _session_request(self, body: dict, rnd) -> dict:
        """Mostly a correctly signed request of the sessions agent (nobody else's session
        is superseded); sometimes with a generated field left in."""
        agent = self.session_agent
        request = {"agentId": agent.name, "keyId": agent.key_id, "nonce": uuid.uuid4().hex,
                   "issuedAt": format_time(now())}
        for name in list(request):
            if name in body and rnd.random() < 0.15:
                request[name] = body[name]
        return signed_if_possible(request, agent) if rnd.random() < 0.9 else body


def signed_if_possible(document: dict, actor: Actor) -> dict:
    """The document signed by the actor; unsigned when it has no canonical form (an
    integer beyond 2**53, say), which the server must refuse all the same."""
    try:
        return sign(document, actor.key, actor.key_id)
    except ValueError:
        return document
