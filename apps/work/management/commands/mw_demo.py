import json
import uuid
from datetime import timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from apps.identity import principals, registry
from apps.identity.principals import Principal
from apps.ledger import pipeline
from apps.ledger.operator import OperatorCommand
from apps.work import recovery
from apps.work.models import Mission
from mission_weave.protocol import canonical
from mission_weave.protocol.timefmt import format_time

WORKER_CARD = {"version": "1", "maxConcurrency": 2,
               "capabilities": [{"id": "research", "version": "1"},
                                {"id": "writing", "version": "1"}]}
AGENTS = {"coordinator": ["coordinator"], "worker-1": ["worker"], "worker-2": ["worker"]}

# The demo Mission's WorkItem graph: id -> (goal, capability, depends on)
GRAPH = {
    "research": ("Collect the sources on the topic", "research", []),
    "outline": ("Outline the report from the sources", "writing", ["research"]),
    "figures": ("Prepare the figures from the sources", "research", ["research"]),
    "report": ("Write the report from the outline and figures", "writing",
               ["outline", "figures"]),
}


def demo_contract(goal: str, capability: str, depends_on: list) -> dict:
    return {
        "schema": "mwp.work-contract/1", "goal": goal,
        "deliverables": [{"id": "result", "description": goal, "mediaType": "text/markdown"}],
        "acceptanceCriteria": [{"id": "complete", "description": "Does what the goal says"},
                               {"id": "sourced", "description": "Cites its inputs",
                                "method": "check:sources-present"}],
        "dependencies": {"workItems": depends_on, "policy": "all_verified"},
        "capabilities": [{"id": capability, "version": "1"}],
        "deadline": format_time(timezone.now() + timedelta(days=7)),
        "urgency": "normal", "businessImpact": "medium",
        "budgets": {"tokens": 200000, "toolCalls": 100, "wallClockSeconds": 3600},
        "retry": {"maxAttempts": 3, "backoff": {"strategy": "exponential", "initialSeconds": 5,
                                                "maxSeconds": 120, "multiplier": 2}},
        "risk": {"class": "low", "requiresExecutionApproval": False},
    }


class Command(OperatorCommand):
    help = ("Load the demo: Group `demo`, a coordinator and two worker Agents (keys under "
            ".mw/agents/), the human MissionOwner owner/owner, the human Coordinator "
            "coordinator/coordinator, the operator admin/admin "
            "(staff, for /admin/), and a Mission with a small WorkItem graph. Safe to run "
            "again.")

    def run(self, **options):
        group, _ = registry.create_group("demo", "Demo Group")
        keys = {name: self._agent(group, name, roles) for name, roles in AGENTS.items()}
        registry.create_user("owner", "owner")
        registry.add_member(group, "user:owner", ["owner"])
        registry.create_user("coordinator", "coordinator")
        registry.add_member(group, "user:coordinator", ["coordinator"])
        self._admin()
        mission = Mission.objects.filter(group=group, mission_id="demo-mission").first()
        if mission is None:
            self._load_mission(group, keys["coordinator"])
        return {"groupId": group.id, "missionId": "demo-mission",
                "agents": {name: str(self._key_file(name)) for name in AGENTS},
                "login": {"username": "owner", "password": "owner"},
                "coordinatorLogin": {"username": "coordinator", "password": "coordinator"},
                "admin": {"username": "admin", "password": "admin"}}

    def _admin(self) -> None:
        """The demo operator: a staff user for /admin/ (a member of no Group)."""
        User = get_user_model()
        if not User.objects.filter(username="admin").exists():
            User.objects.create_superuser("admin", password="admin")

    def _key_file(self, name: str) -> Path:
        return Path(settings.MW_DATA_DIR) / "agents" / f"{name}.json"

    def _agent(self, group, name: str, roles: list) -> dict:
        path = self._key_file(name)
        if path.exists():
            saved = json.loads(path.read_text())
            key = canonical.private_key_from_b64url(saved["privateKey"])
        else:
            key = Ed25519PrivateKey.generate()
        card = WORKER_CARD if "worker" in roles else None
        agent_key = registry.register_agent(name, canonical.public_key_b64url(key), card)
        registry.add_member(group, f"agent:{name}", roles)
        saved = {"agentId": name, "keyId": agent_key.key_id, "groupId": group.id,
                 "privateKey": canonical.private_key_b64url(key)}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(saved, indent=2))
        path.chmod(0o600)
        return {**saved, "key": key}

    def _load_mission(self, group, coordinator: dict) -> None:
        now = timezone.now()
        request = {"agentId": coordinator["agentId"], "keyId": coordinator["keyId"],
                   "nonce": uuid.uuid4().hex, "issuedAt": format_time(now)}
        session = recovery.open_session(
            canonical.sign(request, coordinator["key"], coordinator["keyId"]), now)
        principal = Principal("agent:coordinator", session["sessionEpoch"])
        membership_epoch = principals.membership(group.id, principal).epoch

        def send(type_, body, **fields):
            envelope = {"id": f"demo-{type_}-{fields.get('workItemId', body.get('workItemId'))}",
                        "type": type_, "groupId": group.id, "actor": principal.id,
                        "issuedAt": format_time(timezone.now()),
                        "sessionEpoch": principal.session_epoch,
                        "membershipEpoch": membership_epoch,
                        "body": body, **fields}
            signed = canonical.sign(envelope, coordinator["key"], coordinator["keyId"])
            answer = pipeline.submit(group.id, signed, principal)
            if answer.status != 200:
                raise RuntimeError(f"demo command {type_} failed: {answer.body}")

        send("mission.create", {"missionId": "demo-mission", "title": "Write a sourced report",
                                "ownerId": "user:owner", "coordinatorId": principal.id,
                                # The human Coordinator may steer it from the dashboard too.
                                "delegates": ["user:coordinator"]})
        for item_id, (goal, capability, depends_on) in GRAPH.items():
            send("work.authorize", {"workItemId": item_id, "missionId": "demo-mission",
                                    "contract": demo_contract(goal, capability, depends_on)})
        send("work.offer", {"candidates": ["worker-1", "worker-2"], "mode": "urgent",
                            "expiresAt": format_time(now + timedelta(hours=12))},
             workItemId="research")
