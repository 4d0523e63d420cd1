"""What the LLM reads, in compact shapes: a WorkItem with its contract's terms, its
inputs (the artifacts its dependencies delivered, with their text), its Conversation
(from its audit trail) and a Mission's graph. Tools and resources share these."""

from datetime import datetime
from typing import Any

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import parse_time
from mission_weave.sdk.client import ApiError, utcnow

from .agent import Agent

TEXT_LIMIT = 100_000  # characters of an input's text shown; the rest is named, not sent
TEXT_TYPES = ("application/json", "application/xml", "application/yaml", "application/x-yaml",
              "application/csv", "application/javascript")


def terms(contract: JsonObject) -> JsonObject:
    """The contract as a worker needs it: what to make and how it is judged."""
    return {key: contract.get(key) for key in (
        "goal", "deliverables", "acceptanceCriteria", "budgets", "deadline", "inputs",
        "capabilities", "urgency", "allowed") if contract.get(key) is not None}


def work_item(item: JsonObject) -> JsonObject:
    """A WorkItem as an LLM reads it: state, ownership, lease, contract terms."""
    brief = {"id": item["id"], "missionId": item["missionId"], "state": item["state"],
             "contractRevision": item["contractRevision"], "owner": item.get("owner"),
             "ownershipEpoch": item.get("ownershipEpoch"), "startBy": item.get("startBy"),
             "lease": item.get("lease"), "dependsOn": item.get("dependsOn", []),
             **terms(item["contract"])}
    if item.get("acceptedContractRevision") not in (None, item["contractRevision"]):
        brief["acceptedContractRevision"] = item["acceptedContractRevision"]
    for key in ("requiredResolution", "openAmbiguities", "lastCheckpoint", "review"):
        if item.get(key):
            brief[key] = item[key]
    return brief


def live_offer(item: JsonObject, agent_id: str, now: datetime | None = None) -> JsonObject | None:
    """This Agent's live offer on the item, if it has one."""
    now = now or utcnow()
    for offer in item.get("offers") or ():
        if offer["agentId"] == agent_id and offer.get("status") == "live" \
                and parse_time(offer["expiresAt"]) > now:
            return dict(offer)
    return None


def is_text(media_type: str | None) -> bool:
    media = (media_type or "").split(";")[0].strip().lower()
    return media.startswith("text/") or media in TEXT_TYPES or media.endswith("+json")


async def content(agent: Agent, name: str, media_type: str | None) -> JsonObject:
    """The blob's text for a text media type (else its size), or why it cannot be read."""
    try:
        data = await agent.blob(name)
    except ApiError as error:
        return {"unavailable": f"{error.code}: {error.message}"}
    if not is_text(media_type):
        return {"size": len(data), "note": "binary content, not shown"}
    text = data.decode("utf-8", errors="replace")
    if len(text) > TEXT_LIMIT:
        return {"text": text[:TEXT_LIMIT], "truncated": True, "size": len(data)}
    return {"text": text}


async def published(agent: Agent, work_item_id: str) -> list[JsonObject]:
    """The manifests of the artifacts published for a WorkItem (its audit trail)."""
    audit = await agent.get(f"work-items/{work_item_id}/audit")
    return [event["data"]["manifest"] for event in audit["events"]
            if event["type"] == "artifact.published"]


async def inputs(agent: Agent, work_item_id: str) -> JsonObject:
    """The WorkItem's inputs: for each dependency, the artifacts it submitted (all it
    published if it has not submitted), with their text; and the contract's own inputs."""
    item = await agent.work_item(work_item_id)
    dependencies = []
    for dependency_id in item.get("dependsOn") or ():
        dependency = await agent.work_item(dependency_id)
        manifests = await published(agent, dependency_id)
        submitted = set((dependency.get("submission") or {}).get("artifacts") or ())
        chosen = [m for m in manifests if m["hash"] in submitted] or manifests
        dependencies.append({
            "workItemId": dependency_id, "state": dependency["state"],
            "goal": dependency["contract"].get("goal"),
            "artifacts": [{"hash": m["hash"], "mediaType": m.get("mediaType"),
                           "producer": m.get("producer"),
                           **await content(agent, m["hash"], m.get("mediaType"))}
                          for m in chosen]})
    contract_inputs = []
    for entry in item["contract"].get("inputs") or ():
        ref = entry.get("ref") if isinstance(entry, dict) else None
        shown: JsonObject = dict(entry) if isinstance(entry, dict) else {"input": entry}
        if isinstance(ref, str) and ref.startswith("sha256:"):
            shown.update(await content(agent, ref, shown.get("mediaType")))
        contract_inputs.append(shown)
    return {"workItemId": work_item_id, "dependencies": dependencies,
            "contractInputs": contract_inputs}


CONVERSATION = {
    "conversation.message_posted": lambda d: {"kind": d.get("kind"), "text": d.get("text"),
                                              "messageId": d.get("messageId"),
                                              "resolves": d.get("resolves")},
    "work.blocked": lambda d: {"kind": "blocked", "text": d.get("requiredResolution")},
    "work.unblocked": lambda d: {"kind": "unblocked", "text": d.get("resolution")},
    "work.preemption_requested": lambda d: {"kind": "preemption", "text": d.get("reason")},
}


async def conversation(agent: Agent, work_item_id: str) -> JsonObject:
    """The WorkItem's Conversation, oldest first: messages, ambiguities and resolutions,
    and the questions it was blocked on with their answers."""
    audit = await agent.get(f"work-items/{work_item_id}/audit")
    entries: list[JsonObject] = []
    for event in audit["events"]:
        shape: Any = CONVERSATION.get(event["type"])
        if shape is not None:
            entry = {"at": event["occurredAt"], "by": event["actor"], **shape(event["data"])}
            entries.append({k: v for k, v in entry.items() if v is not None})
    return {"workItemId": work_item_id, "messages": entries}


async def mission_graph(agent: Agent, mission_id: str) -> JsonObject:
    """A Mission, its WorkItems with their states, and its dependency edges."""
    mission = await agent.get(f"missions/{mission_id}")
    items = await agent.work_items(missionId=mission_id)
    return {"mission": {k: mission.get(k) for k in ("id", "title", "state", "ownerId",
                                                    "coordinatorId")},
            "workItems": [{"id": i["id"], "state": i["state"], "owner": i.get("owner"),
                           "goal": i["contract"].get("goal"), "dependsOn": i.get("dependsOn")}
                          for i in items],
            "edges": [{"from": dependency, "to": i["id"]} for i in items
                      for dependency in i.get("dependsOn") or ()]}
