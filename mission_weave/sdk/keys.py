"""An Agent's signing identity, as `mw_demo` writes it to `.mw/agents/<agent>.json`:
`{agentId, keyId, groupId, privateKey}` (the raw Ed25519 seed in base64url)."""

import json
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mission_weave.protocol import canonical


@dataclass(frozen=True)
class AgentKey:
    agent_id: str
    key_id: str
    private_key: Ed25519PrivateKey
    group_id: str | None = None  # the Group the key file was written for, if any

    @property
    def principal(self) -> str:
        return f"agent:{self.agent_id}"

    def sign(self, document: dict) -> dict:
        return canonical.sign(document, self.private_key, self.key_id)

    @classmethod
    def load(cls, path) -> "AgentKey":
        saved = json.loads(Path(path).read_text())
        return cls(agent_id=saved["agentId"], key_id=saved["keyId"],
                   private_key=canonical.private_key_from_b64url(saved["privateKey"]),
                   group_id=saved.get("groupId"))

    def __repr__(self) -> str:  # never print the private key
        return f"AgentKey({self.agent_id!r}, {self.key_id!r})"
