"""The MissionWeave Agent Card of an A2A agent (`mw-a2a-worker register`): one capability
per A2A skill, `{id: <skill id>, version}`.

A2A skills carry no version, so a capability's version is the agent's own major version
(the A2A card's `version` "2.1.0" gives "2"; "1" when it has none that starts with a
number): a major version is the agent's promise of compatibility, and contracts name
capabilities by it. `--capability-version` sets another. The card's own `version` is the
A2A card's, whole."""

from __future__ import annotations

import re

from a2a.types import AgentCard

from mission_weave.protocol.json_types import JsonObject

MAJOR = re.compile(r"^v?(\d+)")


def capability_version(card: AgentCard) -> str:
    found = MAJOR.match(card.version.strip())
    return str(int(found.group(1))) if found else "1"


def mission_weave_card(card: AgentCard, max_concurrency: int = 1,
                       version: str | None = None) -> JsonObject:
    """`{version, capabilities, maxConcurrency}` as mw_register_agent --card takes it."""
    version = version or capability_version(card)
    skills = list(dict.fromkeys(skill.id for skill in card.skills if skill.id))
    return {"version": card.version.strip()[:50] or "1",
            "capabilities": [{"id": skill, "version": version} for skill in skills],
            "maxConcurrency": max_concurrency}
