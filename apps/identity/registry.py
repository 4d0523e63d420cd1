"""Operator actions: Groups, Agents and their keys and cards, members, human users.
The mw_* management commands and the demo call these; so do the tests."""

import json
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.ledger.models import Group
from mission_weave.core.jsonschema_check import check, compile_schema
from mission_weave.protocol.canonical import public_key_from_b64url
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time

from .models import Agent, AgentKey, AgentSession, Membership

AGENT_CARD = compile_schema({
    "type": "object", "additionalProperties": False,
    "required": ["version", "capabilities", "maxConcurrency"],
    "properties": {
        "version": {"type": "string", "minLength": 1, "maxLength": 50},
        "capabilities": {"type": "array", "maxItems": 200, "items": {
            "type": "object", "additionalProperties": False, "required": ["id", "version"],
            "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 200},
                           "version": {"type": "string", "minLength": 1, "maxLength": 50}}}},
        "maxConcurrency": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
})
DEFAULT_CARD = {"version": "1", "capabilities": [], "maxConcurrency": 1}
# Shown with every refused Agent Card, so that the fix is in the message.
CARD_EXAMPLE = {"version": "1", "maxConcurrency": 2,
                "capabilities": [{"id": "research", "version": "1"}]}
CARD_HINT = (f"an Agent Card is a JSON object {{version, maxConcurrency, capabilities: "
             f"[{{id, version}}]}}, e.g. {json.dumps(CARD_EXAMPLE)}")


def card_error(problem: str, details: dict | None = None) -> ProtocolError:
    """VALIDATION_ERROR saying what is wrong with an Agent Card and what a valid one is."""
    return ProtocolError("VALIDATION_ERROR", f"{problem}; {CARD_HINT}",
                         {**(details or {}), "example": CARD_EXAMPLE})


def check_card(card) -> dict:
    """An Agent Card as the registry takes it, or VALIDATION_ERROR naming the path."""
    try:
        check(AGENT_CARD, card, "VALIDATION_ERROR", "Agent Card")
    except ProtocolError as error:
        raise card_error(error.message, error.details) from None
    return card


NAME = compile_schema({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}$"})


def create_group(slug: str, name: str = "") -> tuple[Group, bool]:
    check(NAME, slug, "VALIDATION_ERROR", "group slug")
    # By id, the distribution key: one shard's lookup, not a search of all of them.
    return Group.objects.get_or_create(id=f"grp_{slug}", defaults={"slug": slug,
                                                                   "name": name or slug})


def register_agent(agent_id: str, public_key: str, card: dict | None = None) -> AgentKey:
    """Register an agent, or add a key to one; the same key again is a no-op, unless it
    was revoked: a revoked key stays revoked."""
    check(NAME, agent_id, "VALIDATION_ERROR", "agent id")
    try:
        public_key_from_b64url(public_key)
    except ValueError as error:
        raise ProtocolError("VALIDATION_ERROR", f"public key: {error}") from None
    if card is not None:
        check_card(card)
    with transaction.atomic():
        first = card or DEFAULT_CARD
        agent, created = Agent.objects.select_for_update().get_or_create(
            id=agent_id, defaults={"card": first, "card_versions": [first["version"]]})
        if card is not None and not created and agent.card != card:
            agent.card = card
            agent.card_versions = card_versions(agent.card_versions, card["version"])
            agent.save(update_fields=["card", "card_versions"])
        existing = agent.keys.filter(public_key=public_key).first()
        if existing is not None and not existing.active:
            raise ProtocolError("VALIDATION_ERROR", f"this public key is {existing.key_id}, "
                                "which was revoked; generate a new key and add that one")
        if existing is not None:
            return existing
        number = agent.keys.count() + 1  # keys are never deleted, so numbers never repeat
        return AgentKey.objects.create(key_id=f"{agent_id}#{number}", agent=agent,
                                       public_key=public_key)


def card_versions(recorded: list, version: str) -> list:
    """The versions an Agent Card has had, with `version` (the current one) last; earlier
    versions stay recorded, since manifests produced under them still name them."""
    return [v for v in recorded if v != version] + [version]


def add_key(agent_id: str, public_key: str, card: dict | None = None) -> AgentKey:
    """Another key for a registered agent (`mw_register_agent --add-key`): the next
    `<agent>#<n>`. Unlike register_agent, a mistyped agent id is an error, not a new
    agent."""
    if not Agent.objects.filter(id=agent_id).exists():
        raise ProtocolError("NOT_FOUND", f"no agent {agent_id} is registered; register it "
                            "first (without --add-key)")
    return register_agent(agent_id, public_key, card)


def revoke_key(agent_id: str, key_id: str, now: datetime | None = None) -> tuple[AgentKey, int]:
    """Revoke one of the agent's keys: from now on nothing signed with it verifies (a
    session request, a command, a manifest), and the sessions it opened end at once (a
    session token is bound to the key that opened it). Events it signed stay in the log:
    they were valid when decided. Returns the key and how many sessions ended; revoking
    again changes nothing."""
    now = now or timezone.now()
    with transaction.atomic():
        agent = Agent.objects.select_for_update().filter(id=agent_id).first()
        if agent is None:
            raise ProtocolError("NOT_FOUND", f"no agent {agent_id} is registered")
        key = agent.keys.filter(key_id=key_id).first()
        if key is None:
            known = ", ".join(agent.keys.order_by("created_at").values_list("key_id", flat=True))
            raise ProtocolError("NOT_FOUND", f"agent {agent_id} has no key {key_id} (its keys: "
                                f"{known or 'none'})")
        if key.revoked_at is None:
            key.active, key.revoked_at = False, now
            key.save(update_fields=["active", "revoked_at"])
        # Sessions from before sessions recorded their key could be this key's: end them too.
        ended = AgentSession.objects.filter(
            Q(key_id=key_id) | Q(key_id=None), agent=agent, superseded_at=None,
            expires_at__gt=now).update(expires_at=now)
    return key, ended


def key_listing(agent_id: str) -> list[dict]:
    """The agent's keys as the operator commands print them, oldest first."""
    return [{"keyId": key.key_id, "publicKey": key.public_key, "active": key.active,
             "createdAt": format_time(key.created_at),
             "revokedAt": format_time(key.revoked_at) if key.revoked_at else None}
            for key in AgentKey.objects.filter(agent_id=agent_id).order_by("created_at",
                                                                            "key_id")]


def add_member(group: Group, principal: str, roles: list) -> Membership:
    """Admit a principal or change its roles; the membership epoch grows on a change."""
    unknown = sorted(set(roles) - set(Membership.ROLES))
    if unknown or not roles:
        raise ProtocolError("VALIDATION_ERROR",
                            f"roles must be among {', '.join(Membership.ROLES)}; got {roles}")
    kind, _, name = principal.partition(":")
    if kind not in ("agent", "user") or not name:
        raise ProtocolError("VALIDATION_ERROR", "principal must be agent:<id> or user:<name>")
    if kind == "agent" and not Agent.objects.filter(id=name).exists():
        raise ProtocolError("NOT_FOUND", f"no agent {name} is registered")
    if kind == "user" and not get_user_model().objects.filter(username=name).exists():
        raise ProtocolError("NOT_FOUND", f"no user {name} exists")
    roles = sorted(set(roles))
    with transaction.atomic():
        member, created = Membership.objects.select_for_update().get_or_create(
            group=group, principal=principal, defaults={"roles": roles})
        if not created and (member.roles != roles or not member.active):
            member.roles, member.active, member.epoch = roles, True, member.epoch + 1
            member.save(update_fields=["roles", "active", "epoch", "updated_at"])
    return member


def remove_member(group: Group, principal: str) -> None:
    with transaction.atomic():
        member = Membership.objects.select_for_update().filter(group=group,
                                                               principal=principal).first()
        if member is not None and member.active:
            member.active, member.epoch = False, member.epoch + 1
            member.save(update_fields=["active", "epoch", "updated_at"])


def create_user(username: str, password: str):
    check(NAME, username, "VALIDATION_ERROR", "username")
    user, _created = get_user_model().objects.get_or_create(username=username)
    user.set_password(password)
    user.save()
    return user
