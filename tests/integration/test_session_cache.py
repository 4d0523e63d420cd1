"""The session cache (principals.SESSION_CACHE, issue 27): a command's bearer token costs
no query, and is trusted for nothing. Its session, membership and key are read again in
the Group's locked read, so a replaced session, a removed member, a revoked key or a
changed membership is refused by the very next command, cached or not."""

import pytest

from apps.identity import principals, registry
from tests.support import Scenario

pytestmark = pytest.mark.django_db(transaction=True)


def _renew(s, item_id):
    return s.w1.post(s.w1.envelope("lease.renew", {"leaseSeconds": 600},
                                   **s.lease_fields(item_id)))


def _cached(s) -> bool:
    return principals.SESSION_CACHE.get((principals.token_hash(s.w1.token),
                                         s.world.group.id)) is not None


@pytest.fixture
def running():
    s = Scenario()
    item_id, _ = s.running()
    assert _renew(s, item_id).status_code == 200
    assert _cached(s)
    return s, item_id


def test_a_replaced_session_is_refused_on_the_next_command(running):
    s, item_id = running
    old_token, old_epoch = s.w1.token, s.w1.session_epoch
    assert s.w1.open_session().status_code == 201
    envelope = s.w1.envelope("lease.renew", {"leaseSeconds": 600}, sessionEpoch=old_epoch,
                             **s.lease_fields(item_id))
    s.w1.token = old_token
    body = s.w1.post(envelope).json()
    assert body["error"]["code"] == "STALE_SESSION", body


def test_a_removed_member_is_refused_on_the_next_command(running):
    s, item_id = running
    registry.remove_member(s.world.group, s.w1.principal)
    response = s.w1.post(s.w1.envelope("lease.renew", {"leaseSeconds": 600},
                                       membershipEpoch=1, **s.lease_fields(item_id)))
    assert response.json()["error"]["code"] == "NOT_A_MEMBER", response.json()
    assert not _cached(s)


def test_a_changed_membership_is_stale_and_the_new_epoch_is_let_in(running):
    s, item_id = running
    registry.add_member(s.world.group, s.w1.principal, ["worker", "reviewer"])
    stale = s.w1.envelope("lease.renew", {"leaseSeconds": 600}, membershipEpoch=1,
                          **s.lease_fields(item_id))
    body = s.w1.post(stale).json()
    assert body["error"]["code"] == "STALE_MEMBERSHIP", body
    assert _renew(s, item_id).status_code == 200  # the current epoch, read afresh


def test_a_revoked_key_is_refused_on_the_next_command(running):
    s, item_id = running
    envelope = s.w1.envelope("lease.renew", {"leaseSeconds": 600}, **s.lease_fields(item_id))
    registry.revoke_key(s.w1.name, s.w1.key_id)
    body = s.w1.post(envelope).json()
    # revoking a key ends the sessions it opened (registry.revoke_key), as without the cache
    assert body["error"]["code"] == "UNAUTHENTICATED", body


def test_a_reader_of_the_group_is_not_let_in_from_the_cache(running):
    s, _item_id = running
    registry.remove_member(s.world.group, s.w1.principal)
    assert s.w1.get("events?after=0").status_code == 403
