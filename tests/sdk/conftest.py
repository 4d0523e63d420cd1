"""The SDK against a live server: daphne (mission_weave.runtime.serve) on the test database and
the test Redis, started once per session. The test process creates Groups, agents and
memberships directly (committed, so the server sees them); everything else goes through
the SDK over HTTP and WebSocket."""

import asyncio
import json
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from apps.bench.harness import database_url_of, free_port, start_server, stop_server
from mission_weave.protocol import canonical
from mission_weave.sdk.client import Client
from mission_weave.sdk.keys import AgentKey

CARD = {"version": "1", "maxConcurrency": 2,
        "capabilities": [{"id": "research", "version": "1"}, {"id": "writing", "version": "1"}]}
# Every live Group's MissionOwner: a human member with the owner role (a Mission's
# ownerId must be one), named by the tests' `mission.create` commands.
OWNER = "user:sdk-owner"


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen
    env: dict


@pytest.fixture(scope="session")
def mw_server(django_db_setup, django_db_blocker, tmp_path_factory):
    from django.conf import settings
    from django.db import connection

    if not settings.REDIS_URL:
        pytest.fail("the live-server SDK tests need Redis: set REDIS_URL (make test does)")
    from apps.ledger import signing_keys

    data_dir = tmp_path_factory.mktemp("mw-live")
    # One authority key for both processes: tests take snapshots in this one.
    env = {**os.environ, "DATABASE_URL": database_url_of(connection.settings_dict),
           "DEBUG": "0", "SECRET_KEY": "sdk-tests-" + "x" * 50, "MW_DATA_DIR": str(data_dir),
           "MW_SWEEP_IN_PROCESS": "0",
           # The review (§13.2) runs inline after each submission, so nothing is still
           # working on the database when a test ends (test_review.py runs a real worker).
           "MW_TASKS_EAGER": "1",
           "MW_AUTHORITY_KEY": canonical.private_key_b64url(signing_keys.private_key())}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    port = free_port()
    server = LiveServer(f"http://127.0.0.1:{port}", start_server(port, env=env), env)
    yield server
    stop_server(server.process)


@dataclass
class Agent:
    key: AgentKey
    key_file: Path

    @property
    def name(self) -> str:
        return self.key.agent_id


@dataclass
class LiveGroup:
    """A fresh Group on the live server with a coordinator, two workers and the human
    MissionOwner OWNER (committed: the tests using it are transactional, so the server
    sees it)."""

    server: LiveServer
    group_id: str
    coordinator: Agent
    workers: list
    tmp: Path

    def client(self, agent: Agent) -> Client:
        return Client(self.server.url, agent.key, backoff_seconds=0.05)


@pytest.fixture
def live_group(mw_server, transactional_db, tmp_path) -> LiveGroup:
    from apps.identity import registry

    suffix = uuid.uuid4().hex[:8]
    agents = {}
    group, _ = registry.create_group(f"sdk-{suffix}")
    registry.create_user(OWNER.removeprefix("user:"), "sdk-owner")
    registry.add_member(group, OWNER, ["owner"])
    for name, roles in ((f"coord-{suffix}", ["coordinator"]),
                        (f"w1-{suffix}", ["worker"]), (f"w2-{suffix}", ["worker"])):
        private = Ed25519PrivateKey.generate()
        key = registry.register_agent(name, canonical.public_key_b64url(private),
                                      CARD if roles == ["worker"] else None)
        registry.add_member(group, f"agent:{name}", roles)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"agentId": name, "keyId": key.key_id, "groupId": group.id,
                                    "privateKey": canonical.private_key_b64url(private)}))
        agents[name] = Agent(AgentKey.load(path), path)
    names = list(agents)
    return LiveGroup(mw_server, group.id, agents[names[0]],
                     [agents[names[1]], agents[names[2]]], tmp_path)


def run(coroutine, timeout: float = 60):
    """Run a coroutine to completion with a bound, from a sync test."""
    return asyncio.run(asyncio.wait_for(coroutine, timeout))
