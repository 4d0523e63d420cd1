"""A WorkItem's Conversation for the dashboard: its messages in order, and its
ambiguities with whether each is open and what resolved it. Pure: the audit trail's
event documents in, plain data out.

Open or not is the projection's word (WorkItem.open_ambiguities), passed in, so the page
never disagrees with the acceptance gate. What resolved a closed one is read from the log
the way mission_weave/core/evolve.py evolves it: a contract revision clears every open
ambiguity; a resolution message answers one but clears it only in older logs, whose
resolutions carry no `cleared: false`."""

POSTED = "conversation.message_posted"


def conversation(events: list[dict], open_ambiguities) -> dict:
    """{messages, ambiguities, open}: `open` is the open ambiguities, oldest first."""
    messages: list[dict] = []
    ambiguities: dict[str, dict] = {}
    for event in events:
        data = event["data"]
        if event["type"] == "work.contract_revised":
            for ambiguity in ambiguities.values():
                if ambiguity["resolved_how"] is None:
                    _resolve(ambiguity, event, f"contract revision {data['contractRevision']}")
        if event["type"] != POSTED:
            continue
        message = {"sequence": event["sequence"], "at": event["occurredAt"],
                   "message_id": data["messageId"], "actor": data["author"],
                   "kind": data["kind"], "text": data["text"], "resolves": data.get("resolves")}
        messages.append(message)
        if data["kind"] == "ambiguity":
            ambiguities[data["messageId"]] = {
                "message_id": data["messageId"], "sequence": event["sequence"],
                "at": event["occurredAt"], "raised_by": data["author"], "text": data["text"],
                "answers": [], "resolved_by": None, "resolved_at": None, "resolved_how": None}
        answered = ambiguities.get(data.get("resolves"))
        if data["kind"] == "resolution" and answered is not None:
            answered["answers"].append(message)
            if data.get("cleared", True) and answered["resolved_how"] is None:
                _resolve(answered, event, f"resolution message #{event['sequence']}")
    listed = [{**a, "open": a["message_id"] in open_ambiguities} for a in ambiguities.values()]
    return {"messages": messages, "ambiguities": listed,
            "open": [a for a in listed if a["open"]]}


def _resolve(ambiguity: dict, event: dict, how: str) -> None:
    ambiguity.update(resolved_by=event["actor"], resolved_at=event["occurredAt"],
                     resolved_how=how)
