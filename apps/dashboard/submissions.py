"""Two submissions of a WorkItem side by side: when a WorkItem is submitted again (after
a refusal, a failed review, a retry), the Coordinator and the MissionOwner read the new
deliverable beside the old one, as a line diff where both are text (reader.side_by_side,
difflib; every line escaped by the template)."""

from django.conf import settings

from apps.api.views import audit_trail
from apps.artifacts.models import Artifact
from mission_weave.core.json_types import JsonObject

from . import artifact_content, reader
from .access import Viewer
from .pages import get_mission, work_item


def history(trail: dict) -> list:
    """Each work.submitted of the WorkItem, oldest first: {number, sequence, at, actor,
    contractRevision, artifacts: [(label, hash)]}; a deliverable's artifact is labelled
    with the deliverable's id (from Evidence whose subject is deliverable:<id>)."""
    found: list[JsonObject] = []
    for event in trail["events"]:
        if event["type"] != "work.submitted":
            continue
        data = event["data"]
        labelled: dict[str, str] = {}
        for record in data.get("evidence", []):
            subject = record.get("subject") or ""
            if subject.startswith("deliverable:"):
                for name in record.get("artifacts", []):
                    labelled.setdefault(name, subject.removeprefix("deliverable:"))
        cited = list(dict.fromkeys([*data.get("artifacts", []), *labelled]))
        found.append({"number": len(found) + 1, "sequence": event["sequence"],
                      "at": event["occurredAt"], "actor": event["actor"],
                      "contractRevision": data.get("contractRevision"),
                      "artifacts": [(labelled.get(h), h) for h in cited]})
    return found


def page(viewer: Viewer, item_id: str, now, wanted: str | None = None) -> dict:
    """Two submissions of a WorkItem side by side (by default the latest and the one
    before; `?at=<n>` compares submission n with n-1): each deliverable of the later one
    beside its counterpart in the earlier one (the same deliverable id, else the same
    media type in order), with a line diff where both are text."""
    item = work_item(viewer, item_id)
    mission = get_mission(viewer, item.mission_id)
    found = history(audit_trail(viewer.group_id, item_id))
    later = len(found)
    if wanted and wanted.isdigit() and 2 <= int(wanted) <= len(found):
        later = int(wanted)
    pairs = []
    if later >= 2:
        old, new = found[later - 2], found[later - 1]
        records = {r.hash: r.doc for r in Artifact.objects.filter(
            group_id=viewer.group_id,
            hash__in=[h for s in (old, new) for _, h in s["artifacts"]])}
        for before, after in pair_artifacts(old["artifacts"], new["artifacts"], records):
            pairs.append(compared(viewer, records, before, after, now))
    return {"item": item, "mission": mission, "history": found,
            "old": found[later - 2] if later >= 2 else None,
            "new": found[later - 1] if later >= 1 else None, "pairs": pairs}


def pair_artifacts(old: list, new: list, records: dict) -> list:
    """[(old hash or None, new hash or None)]: by deliverable id, then by media type in
    order; what has no counterpart stands alone."""
    def media(name):
        return (records.get(name) or {}).get("manifest", {}).get("mediaType", "")

    pairs, left = [], list(old)
    for label, name in new:
        match = next((o for o in left if label and o[0] == label), None) or \
            next((o for o in left if not (label and o[0]) and media(o[1]) == media(name)), None)
        if match is not None:
            left.remove(match)
        pairs.append((match[1] if match else None, name))
    return pairs + [(name, None) for _, name in left]


def compared(viewer: Viewer, records: dict, before: str | None, after: str | None, now) -> dict:
    limit = settings.MW_READER_DIFF_BYTES
    side: dict[str, JsonObject] = {}
    for key, name in (("old", before), ("new", after)):
        record = records.get(name)
        text, cut = (artifact_content.text_of(viewer, record, now, limit) if record
                     else (None, False))
        side[key] = {"hash": name, "known": record is not None, "text": text, "cut": cut,
                     "media_type": record["manifest"]["mediaType"] if record else None}
    diff = None
    if side["old"]["text"] is not None and side["new"]["text"] is not None:
        diff = reader.side_by_side(side["old"]["text"], side["new"]["text"])
    return {**side, "diff": diff, "limit": limit}
