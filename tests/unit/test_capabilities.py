"""Capability tokens bound to the Execution Lease (§11.3), in the pure core: scopes from the
contract, narrowing is a subset only, expiry never past the lease boundary, rotation and
narrowing revoke the held tokens, every token dies with its lease."""

from dataclasses import replace

import pytest

from mission_weave.core import capabilities, commands, state, state_documents
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import at, iso, progress

SCOPES = {"tools": ["search", "fetch"], "operations": ["read", "write"]}


def active_item(**contract_overrides):
    """An active item whose start issued a token with the contract's scopes (T0 + 0)."""
    item = builders.work_item(state.QUEUED, contract=builders.contract(
        allowed={"tools": ["search", "fetch"], "data": [], "operations": ["read", "write"],
                 "resources": {}}, **contract_overrides))
    view = builders.with_deliverable(builders.view_of(item))
    start = builders.command("work.start", {"leaseSeconds": 300}, item, command_id="cmd-start")
    drafts = commands.decide(view, start, builders.context())
    return builders.apply(view, drafts), drafts[0].data


def holder_command(view, command_type, body, command_id="cmd-cap", **fields):
    item = view.items[builders.ITEM_ID]
    return builders.command(command_type, body, item, command_id=command_id, **fields)


def decide_and_apply(view, command, now=builders.T0):
    drafts = commands.decide(view, command, builders.context(now=now))
    return drafts, builders.apply(view, drafts, now)


# --- pure rules ------------------------------------------------------------------------------

def test_scopes_come_from_the_contracts_allowed_tools_and_operations():
    contract = builders.contract(allowed={"tools": ["search"], "data": ["q3"],
                                          "operations": ["read"], "resources": {}})

    assert capabilities.contract_scopes(contract) == {"tools": ["search"],
                                                      "operations": ["read"]}
    assert capabilities.contract_scopes({}) == {"tools": [], "operations": []}


def test_narrowing_to_a_subset_keeps_what_a_kind_left_out_holds():
    assert capabilities.narrowed(SCOPES, {"tools": ["search"]}) == {
        "tools": ["search"], "operations": ["read", "write"]}
    assert capabilities.narrowed(SCOPES, {"tools": [], "operations": []}) == {
        "tools": [], "operations": []}


def test_narrowing_never_widens():
    with pytest.raises(ProtocolError) as raised:
        capabilities.narrowed(SCOPES, {"tools": ["search", "shell"], "operations": ["delete"]})

    assert raised.value.code == "FORBIDDEN"
    assert raised.value.details["widening"] == {"tools": ["shell"], "operations": ["delete"]}


def test_expiry_is_the_lease_boundary_or_earlier():
    boundary = at(300)

    assert capabilities.expiry(boundary, builders.T0) == boundary
    assert capabilities.expiry(boundary, builders.T0, 60) == at(60)
    assert capabilities.expiry(boundary, builders.T0, 3600) == boundary


def test_scope_string_is_space_separated():
    assert capabilities.scope_string(SCOPES) == (
        "tool:search tool:fetch operation:read operation:write")


# --- issued by work.start, recorded by evolve ---------------------------------------------------

def test_work_start_issues_a_token_bound_to_the_new_lease_until_its_expiry():
    view, started = active_item()
    item = view.items[builders.ITEM_ID]
    token = started["capabilityToken"]

    assert token["leaseId"] == started["leaseId"] == item.lease.id
    assert token["expiresAt"] == started["expiresAt"] == iso(300)
    assert token["scopes"] == SCOPES
    assert item.capability_tokens == ({**token, "revoked": False},)
    assert capabilities.is_active(item, capabilities.find(item, token["id"]), builders.T0)


def test_a_token_is_active_only_before_its_own_and_its_leases_expiry():
    view, started = active_item()
    item = view.items[builders.ITEM_ID]
    token = capabilities.find(item, started["capabilityToken"]["id"])
    short = {**token, "expiresAt": iso(100)}

    assert capabilities.is_active(item, token, at(299))
    assert not capabilities.is_active(item, token, at(300))
    assert not capabilities.is_active(item, short, at(100))
    # A token can never outlive the lease even if its own expiry said otherwise.
    assert not capabilities.is_active(item, {**token, "expiresAt": iso(900)}, at(300))
    assert not capabilities.is_active(item, {**token, "revoked": True}, builders.T0)
    assert not capabilities.is_active(item, {**token, "leaseId": "lease_other"}, builders.T0)
    assert not capabilities.is_active(item, None, builders.T0)


def test_the_tokens_round_trip_through_the_stored_document():
    view, _ = active_item()
    item = view.items[builders.ITEM_ID]

    assert state_documents.item_from_doc(state_documents.to_doc(item)) == item


def test_a_document_written_before_tokens_existed_still_loads():
    view, _ = active_item()
    doc = state_documents.to_doc(view.items[builders.ITEM_ID])
    del doc["capability_tokens"], doc["retry_exhausted"]

    assert state_documents.item_from_doc(doc).capability_tokens == ()


# --- rotate and narrow --------------------------------------------------------------------------

def test_rotation_revokes_the_held_token_and_issues_one_with_the_same_scopes():
    view, started = active_item()
    old_id = started["capabilityToken"]["id"]

    drafts, after = decide_and_apply(view, holder_command(view, "capability.rotate", {}))
    item = after.items[builders.ITEM_ID]
    (event,) = drafts
    new = event.data["capabilityToken"]

    assert event.type == "capability.rotated"
    assert event.data["revokedTokenIds"] == [old_id]
    assert event.data["leaseId"] == item.lease.id
    assert new["id"] != old_id and new["scopes"] == SCOPES and new["expiresAt"] == iso(300)
    assert not capabilities.is_active(item, capabilities.find(item, old_id), builders.T0)
    assert capabilities.is_active(item, capabilities.find(item, new["id"]), builders.T0)
    assert item.state == state.ACTIVE


def test_rotation_may_narrow_and_shorten_but_not_past_the_lease():
    view, _ = active_item()

    drafts, _ = decide_and_apply(view, holder_command(
        view, "capability.rotate", {"scopes": {"operations": ["read"]}, "expiresInSeconds": 60}))
    longer, _ = decide_and_apply(view, holder_command(
        view, "capability.rotate", {"expiresInSeconds": 86400}, command_id="cmd-long"))

    assert drafts[0].data["capabilityToken"]["scopes"] == {"tools": ["search", "fetch"],
                                                           "operations": ["read"]}
    assert drafts[0].data["capabilityToken"]["expiresAt"] == iso(60)
    assert longer[0].data["capabilityToken"]["expiresAt"] == iso(300)


def test_narrowing_issues_a_subset_and_revokes_the_old_token():
    view, started = active_item()

    drafts, after = decide_and_apply(view, holder_command(
        view, "capability.narrow", {"scopes": {"tools": ["search"], "operations": ["read"]}}))
    item = after.items[builders.ITEM_ID]
    new = drafts[0].data["capabilityToken"]

    assert drafts[0].type == "capability.narrowed"
    assert new["scopes"] == {"tools": ["search"], "operations": ["read"]}
    assert capabilities.current(item)["id"] == new["id"]
    assert capabilities.find(item, started["capabilityToken"]["id"])["revoked"]


def test_a_narrowed_token_cannot_be_widened_again_by_rotation_or_renewal():
    view, _ = active_item()
    _, view = decide_and_apply(view, holder_command(
        view, "capability.narrow", {"scopes": {"tools": ["search"]}}))

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, holder_command(view, "capability.rotate",
                                             {"scopes": {"tools": ["fetch"]}},
                                             command_id="cmd-widen"), builders.context())
    renewed, _ = decide_and_apply(view, holder_command(view, "lease.renew", {"leaseSeconds": 600},
                                                       command_id="cmd-renew"))

    assert raised.value.code == "FORBIDDEN"
    assert renewed[0].data["capabilityToken"]["scopes"]["tools"] == ["search"]
    assert renewed[0].data["capabilityToken"]["expiresAt"] == iso(600)


def test_a_rejected_narrowing_changes_nothing():
    view, _ = active_item()
    before = view.items[builders.ITEM_ID]

    with pytest.raises(ProtocolError):
        commands.decide(view, holder_command(view, "capability.narrow",
                                             {"scopes": {"tools": ["shell"]}}), builders.context())

    assert view.items[builders.ITEM_ID] is before


def test_only_the_lease_holder_may_rotate():
    view, _ = active_item()

    with pytest.raises(ProtocolError) as other_lease:
        commands.decide(view, holder_command(view, "capability.rotate", {}, lease_id="lease_x"),
                        builders.context())
    with pytest.raises(ProtocolError) as other_agent:
        commands.decide(view, holder_command(view, "capability.rotate", {}, actor="agent:w2"),
                        builders.context())
    with pytest.raises(ProtocolError) as coordinator:
        commands.decide(view, holder_command(view, "capability.rotate", {},
                                             roles={"coordinator"}), builders.context())

    assert other_lease.value.code == "STALE_LEASE"
    assert other_agent.value.code == "STALE_LEASE"
    assert coordinator.value.code == "FORBIDDEN"


def test_rotation_after_the_lease_expired_is_refused():
    view, _ = active_item()

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, holder_command(view, "capability.rotate", {}),
                        builders.context(now=at(300)))

    assert raised.value.code == "LEASE_EXPIRED"


def test_a_renewal_token_lives_beside_the_older_one_until_its_earlier_boundary():
    view, started = active_item()
    first = started["capabilityToken"]["id"]
    _, after = decide_and_apply(view, holder_command(view, "lease.renew", {"leaseSeconds": 600},
                                                     command_id="cmd-renew"), now=at(100))
    item = after.items[builders.ITEM_ID]

    assert capabilities.is_active(item, capabilities.find(item, first), at(299))
    assert not capabilities.is_active(item, capabilities.find(item, first), at(300))
    assert capabilities.is_active(item, capabilities.current(item), at(699))


def test_expired_tokens_are_dropped_from_the_state_when_a_new_one_is_issued():
    view, started = active_item()
    _, view = decide_and_apply(view, holder_command(view, "lease.renew", {"leaseSeconds": 600},
                                                    command_id="cmd-renew-1"), now=at(100))
    _, view = decide_and_apply(view, holder_command(view, "lease.renew", {"leaseSeconds": 600},
                                                    command_id="cmd-renew-2"), now=at(400))

    ids = [t["id"] for t in view.items[builders.ITEM_ID].capability_tokens]
    assert started["capabilityToken"]["id"] not in ids
    assert len(ids) == 2


# --- every token dies with its lease --------------------------------------------------------------

CLOSERS = {
    "work.checkpoint": {"progress": progress()},
    "work.block": {"checkpoint": {"progress": progress()},
                   "requiredResolution": "needs the figures"},
    "work.submit": {"contractRevision": 1, "artifacts": [builders.DELIVERABLE],
                    "evidence": [builders.evidence(["ac1", "ac2"])]},
    "work.fail": {"evidence": [builders.evidence(["ac1"], result="outage")]},
    "work.cancel": {"reason": "no longer needed"},
}


@pytest.mark.parametrize("command_type", CLOSERS)
def test_closing_the_lease_revokes_every_token(command_type):
    view, _ = active_item()
    _, view = decide_and_apply(view, holder_command(view, "capability.rotate", {}))
    # The Mission's Coordinator cancels; the lease holder closes the lease otherwise.
    sender = ({"roles": {"coordinator"}, "actor": builders.COORDINATOR}
              if command_type == "work.cancel" else {"roles": builders.ALL_ROLES})

    _, after = decide_and_apply(view, holder_command(view, command_type, CLOSERS[command_type],
                                                     command_id="cmd-close", **sender))
    item = after.items[builders.ITEM_ID]

    assert item.live_lease is None
    assert item.capability_tokens and all(t["revoked"] for t in item.capability_tokens)
    assert capabilities.current(item) is None


def test_a_new_start_replaces_the_previous_leases_tokens():
    view, started = active_item()
    _, view = decide_and_apply(view, holder_command(view, "work.checkpoint",
                                                    {"progress": progress()}))
    item = view.items[builders.ITEM_ID]
    restart = builders.command("work.start", {}, item, command_id="cmd-restart")

    drafts, after = decide_and_apply(view, restart, now=at(10))
    tokens = after.items[builders.ITEM_ID].capability_tokens

    assert [t["id"] for t in tokens] == [drafts[0].data["capabilityToken"]["id"]]
    assert drafts[0].data["capabilityToken"]["leaseId"] != started["leaseId"]


def test_a_lease_without_a_recorded_token_rotates_from_the_contracts_scopes():
    item = replace(builders.work_item(state.ACTIVE), capability_tokens=())
    view = builders.view_of(item)

    drafts = commands.decide(view, builders.command("capability.rotate", {}, item),
                             builders.context())

    assert drafts[0].data["revokedTokenIds"] == []
    assert drafts[0].data["capabilityToken"]["scopes"] == {"tools": ["search"],
                                                           "operations": ["read"]}
