import json
from pathlib import Path

from django.core.management.base import CommandError

from apps.identity import registry
from apps.ledger.operator import OperatorCommand


class Command(OperatorCommand):
    help = "Register an Agent's Ed25519 public key (raw 32 bytes, base64url) and Agent Card."

    def add_arguments(self, parser):
        parser.add_argument("agent_id")
        parser.add_argument("--public-key", required=True)
        parser.add_argument("--card", help="a JSON file: {version, capabilities, maxConcurrency}")

    def run(self, agent_id, public_key, card, **options):
        card_document = None
        if card:
            try:
                card_document = json.loads(Path(card).read_text())
            except (OSError, ValueError) as error:
                raise CommandError(f"cannot read the Agent Card {card}: {error}")
        key = registry.register_agent(agent_id, public_key, card_document)
        return {"agentId": agent_id, "keyId": key.key_id, "card": key.agent.card}
