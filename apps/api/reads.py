"""The wire shapes of projected state (PROTOCOL §2 "Reads")."""

from mission_weave.core import state, state_documents
from mission_weave.protocol.timefmt import format_time


def _time(moment):
    return format_time(moment) if moment is not None else None


def work_item(item: state.WorkItem) -> dict:
    lease = item.live_lease
    return {
        "id": item.id, "missionId": item.mission_id, "state": item.state,
        "revision": item.revision, "contractRevision": item.contract_revision,
        "contract": item.contract, "ownershipEpoch": item.ownership_epoch, "owner": item.owner,
        "startBy": _time(item.start_by),
        "lease": {"id": lease.id, "expiresAt": _time(lease.expires_at)} if lease else None,
        "dependsOn": list(item.depends_on), "dependencyPolicy": item.dependency_policy,
        "acceptedContractRevision": item.accepted_revision,
        "executionApproved": item.execution_approved,
        "offers": [state_documents.offer_to_doc(o) for o in item.offers],
        "offerMode": item.offer_mode,
        "attempts": item.attempts, "blockedUntil": _time(item.blocked_until),
        "requiredResolution": item.required_resolution, "childMissionId": item.child_mission_id,
        "lastCheckpoint": item.last_checkpoint, "submission": item.submission,
        "review": item.review,
        "openAmbiguities": list(item.open_ambiguities), "usage": item.usage,
        "scheduleDisclosure": item.schedule_disclosure,
    }


def mission(mission: state.Mission) -> dict:
    return {
        "id": mission.id, "title": mission.title, "state": mission.state,
        "ownerId": mission.owner_id, "coordinatorId": mission.coordinator_id,
        "parentWorkItemId": mission.parent_work_item_id, "workItems": list(mission.work_items),
        "revision": mission.revision, "budgets": mission.budgets,
        "autoDispatch": mission.auto_dispatch, "usage": mission.usage,
    }


def refused_command(record) -> dict:
    return {"commandId": record.command_id, "type": record.type, "actor": record.actor,
            "at": _time(record.created_at), "status": record.status,
            "error": record.response.get("error"), "command": record.envelope}
