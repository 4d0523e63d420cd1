"""An Agent's signing identity, as `mw_demo` writes it to `.mw/agents/<agent>.json`:
`{agentId, keyId, groupId, privateKey}` (the raw Ed25519 seed in base64url).

A new one, in one command (the file is written with mode 0600, never over another):

    python -m mission_weave.sdk.keys new AGENT_ID [--group GROUP] [--out FILE]
        [--card CARD.json] [--roles worker] [--key-id AGENT_ID#1]

It prints the public key and the two operator commands to run next on the server
(`mw_register_agent AGENT_ID --public-key=<key>` and `mw_add_member`).
"""

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mission_weave.protocol import canonical
from mission_weave.protocol.json_types import JsonObject

AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}$")  # the server's rule for names


@dataclass(frozen=True)
class AgentKey:
    agent_id: str
    key_id: str
    private_key: Ed25519PrivateKey
    group_id: str | None = None  # the Group the key file was written for, if any

    @property
    def principal(self) -> str:
        return f"agent:{self.agent_id}"

    @property
    def public_key(self) -> str:
        """The raw 32-byte public key in base64url, as mw_register_agent takes it."""
        return canonical.public_key_b64url(self.private_key)

    def sign(self, document: JsonObject) -> JsonObject:
        return canonical.sign(document, self.private_key, self.key_id)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "AgentKey":
        saved = json.loads(Path(path).read_text())
        return cls(agent_id=saved["agentId"], key_id=saved["keyId"],
                   private_key=canonical.private_key_from_b64url(saved["privateKey"]),
                   group_id=saved.get("groupId"))

    def save(self, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
        """Write the key file with mode 0600; an existing file is kept unless `overwrite`."""
        key_file = Path(path)
        key_file.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"agentId": self.agent_id, "keyId": self.key_id,
                           "groupId": self.group_id,
                           "privateKey": canonical.private_key_b64url(self.private_key)},
                          indent=2) + "\n"
        target = key_file.with_name(key_file.name + ".new") if overwrite else key_file
        if overwrite:
            target.unlink(missing_ok=True)
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(text)
        if overwrite:
            target.replace(key_file)
        return key_file

    def __repr__(self) -> str:  # never print the private key
        return f"AgentKey({self.agent_id!r}, {self.key_id!r})"


def new_key(agent_id: str, group_id: str | None = None, key_id: str | None = None) -> AgentKey:
    """A fresh Ed25519 key for `agent_id`. The server numbers an agent's keys
    `<agentId>#1`, `#2`, ... as they are registered: a new agent's first is `#1`."""
    return AgentKey(agent_id, key_id or f"{agent_id}#1", Ed25519PrivateKey.generate(), group_id)


def next_steps(key: AgentKey, card: str | None = None, roles: str = "worker") -> list[str]:
    """The operator commands that make `key` an Agent of its Group."""
    register = f"python manage.py mw_register_agent {key.agent_id} --public-key={key.public_key}"
    if card:
        register += f" --card {card}"
    return [register, f"python manage.py mw_add_member {key.group_id or 'GROUP_ID'} "
                      f"{key.principal} --roles {roles}"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mission_weave.sdk.keys",
                                     description="Agent key files for the MissionWeave SDK.")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="write a new Ed25519 key file and print the "
                              "commands that register it")
    new.add_argument("agent_id", metavar="AGENT_ID")
    new.add_argument("--group", help="the Group it works for (the worker's default Group)")
    new.add_argument("--out", help="the key file (default: .mw/agents/AGENT_ID.json)")
    new.add_argument("--card", metavar="FILE", help="an Agent Card JSON file to name in the "
                     "mw_register_agent command: {version, capabilities, maxConcurrency}")
    new.add_argument("--roles", default="worker", help="roles for mw_add_member "
                     "(default: worker)")
    new.add_argument("--key-id", help="the keyId (default: AGENT_ID#1, what the server "
                     "names a new agent's first key)")
    new.add_argument("--force", action="store_true", help="replace an existing key file")
    args = parser.parse_args(argv)

    if not AGENT_ID.match(args.agent_id):
        parser.error(f"agent id {args.agent_id!r}: letters, digits and _ . @ + - only, "
                     "starting with a letter or digit, at most 100")
    out = Path(args.out or Path(".mw") / "agents" / f"{args.agent_id}.json")
    key = new_key(args.agent_id, args.group, args.key_id)
    try:
        key.save(out, overwrite=args.force)
    except FileExistsError:
        raise SystemExit(f"{out} exists: keep it, or pass --force to replace that key") from None
    except OSError as error:
        raise SystemExit(f"cannot write {out}: {error}") from None
    print(f"wrote {out} (mode 0600): agent {key.agent_id}, keyId {key.key_id}"
          + (f", Group {key.group_id}" if key.group_id else ""))
    print(f"public key: {key.public_key}")
    print("next, on the server (from the project folder, its virtualenv active):")
    for line in next_steps(key, args.card, args.roles):
        print(f"  {line}")
    if not args.card:
        print("  (add --card FILE to mw_register_agent to give it capabilities: a worker with "
              "none is offered nothing)")
    if not args.group:
        print("  (GROUP_ID: the Group to admit it to, e.g. grp_demo)")
    print(f"mw_register_agent prints the keyId it gave this key; if it is not {key.key_id} "
          f"(the agent already had a key), set \"keyId\" in {out} to it.")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
