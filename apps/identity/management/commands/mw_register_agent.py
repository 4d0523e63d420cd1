import json
from pathlib import Path

from django.core.management.base import CommandError

from apps.identity import keyfiles, registry
from apps.ledger.operator import OperatorCommand


class Command(OperatorCommand):
    help = ("Register an Agent's Ed25519 public key (raw 32 bytes, base64url) and Agent Card. "
            "Give the key as --public-key KEY or --public-key=KEY (a key that begins with '-' "
            "is taken as the key either way) or as --public-key-file FILE, a file holding the "
            "key or a JSON key file with a privateKey or publicKey member (the SDK's "
            ".mw/agents/<agent>.json). Rotating a key: --add-key gives a registered agent "
            "another key (the next <agent>#<n>); --revoke-key KEYID revokes one, which ends "
            "the sessions it opened and makes everything signed with it refused from then on. "
            "Prints {agentId, keyId, card, keys}.")

    def add_arguments(self, parser):
        parser.add_argument("agent_id")
        parser.add_argument("--public-key", metavar="KEY",
                            help="the public key, raw 32 bytes in base64url (--public-key "
                                 "KEY or --public-key=KEY; it may begin with '-')")
        parser.add_argument("--public-key-file", metavar="FILE",
                            help="a file holding the base64url public key, or a JSON key file "
                                 "{agentId, keyId, privateKey} as the SDK reads (the public "
                                 "key is derived from privateKey) or one with publicKey")
        parser.add_argument("--card", metavar="FILE",
                            help="a JSON file holding the Agent Card, e.g. "
                                 + json.dumps(registry.CARD_EXAMPLE).replace("%", "%%"))
        parser.add_argument("--add-key", action="store_true",
                            help="add the key to an agent registered already (refused if it "
                                 "is not): its next key id <agent>#<n>, printed")
        parser.add_argument("--revoke-key", metavar="KEYID",
                            help="revoke this key of the agent (no key option with it): "
                                 "its signatures are refused from now on and the sessions "
                                 "it opened end; the events it signed stay in the log")

    def run(self, agent_id, public_key, public_key_file, card, add_key=False, revoke_key=None,
            **options):
        if revoke_key is not None:
            others = [name for name, value in (("--public-key", public_key),
                                               ("--public-key-file", public_key_file),
                                               ("--card", card), ("--add-key", add_key))
                      if value]
            if others:
                raise CommandError(f"--revoke-key takes no other option ({', '.join(others)} "
                                   "given): revoke in one call, add a key in another")
            key, ended = registry.revoke_key(agent_id, revoke_key)
            return {"agentId": agent_id, "keyId": key.key_id, "revoked": True,
                    "endedSessions": ended, "keys": registry.key_listing(agent_id)}
        if (public_key is None) == (public_key_file is None):
            given = "both" if public_key is not None else "neither"
            raise CommandError(f"give exactly one of --public-key=KEY and --public-key-file "
                               f"FILE ({given} given)")
        if public_key_file is not None:
            public_key = keyfiles.public_key_from_file(public_key_file)
        card_document = _read_card(card) if card is not None else None
        register = registry.add_key if add_key else registry.register_agent
        key = register(agent_id, public_key, card_document)
        return {"agentId": agent_id, "keyId": key.key_id, "card": key.agent.card,
                "keys": registry.key_listing(agent_id)}


def _read_card(path: str):
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise registry.card_error(f"cannot read the Agent Card file {path} ({error})") from None
    try:
        return json.loads(text)
    except ValueError as error:
        raise registry.card_error(f"the Agent Card file {path} is not JSON ({error})") from None
