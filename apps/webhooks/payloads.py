"""What a delivery POSTs, by the webhook's format:

- `json`: {"id": <delivery id>, "webhookId", "type": <event type>, "event": <the event
  document as PROTOCOL §3 defines it, as GET .../events serves it>};
- `slack`: {"text": <one readable line>}, what a Slack (or Mattermost, Rocket.Chat)
  incoming webhook takes. The line quotes what agents wrote (titles, messages), so
  Slack's control characters are escaped: otherwise an agent could write `<!channel>`
  and notify a whole channel, or a link dressed as other text."""

import hashlib
import json

TEXT_MAX = 300  # of any one agent-written field in the Slack line


def delivery_id(webhook_id: str, event_id: str) -> str:
    """Stable for one webhook and one event, whoever makes the row and however often."""
    return "whd_" + hashlib.sha256(f"{webhook_id}/{event_id}".encode()).hexdigest()[:32]


def body(format_: str, webhook_id: str, document: dict) -> str:
    identifier = delivery_id(webhook_id, document["id"])
    if format_ == "slack":
        payload: dict = {"text": slack_text(document)}
    else:
        payload = {"id": identifier, "webhookId": webhook_id, "type": document["type"],
                   "event": document}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def slack_escape(text: str) -> str:
    """Slack's three control characters (https://api.slack.com/reference/surfaces/formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(document: dict) -> str:
    data = document.get("data") or {}
    parts = [f"[{document['groupId']} #{document['sequence']}] {document['type']}",
             f"by {document['actor']}"]
    if document.get("workItemId"):
        parts.append(f"on {document['workItemId']}")
    elif document.get("missionId"):
        parts.append(f"on {document['missionId']}")
    said = _said(data)
    if said:
        parts.append(f"— {said}")
    return slack_escape(" ".join(parts))


def _said(data: dict) -> str:
    """A short human-readable detail of the event, where it has one."""
    for key in ("title", "reason", "text", "message", "state"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            flat = " ".join(value.split())
            return flat if len(flat) <= TEXT_MAX else flat[:TEXT_MAX - 1] + "…"
    contract = data.get("contract")
    if isinstance(contract, dict):
        return _said({"title": contract.get("title") or contract.get("goal")})
    return ""
