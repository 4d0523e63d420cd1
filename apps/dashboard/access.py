"""Who is looking: a logged-in human is the principal `user:<username>`, and sees a Group
only through a live membership there. Anyone else gets the same 404 as for a Group
that does not exist, so the page reveals nothing of it."""

from dataclasses import dataclass

from apps.api.auth import user_principal
from apps.identity import principals
from apps.identity.models import Membership
from apps.identity.principals import Principal
from mission_weave.core.commands import authority
from mission_weave.protocol.errors import ProtocolError


class NotFound(Exception):
    """No such page for this viewer (unknown, or not theirs to see)."""


@dataclass(frozen=True)
class Viewer:
    principal: Principal
    group_id: str
    roles: frozenset
    membership_epoch: int

    @property
    def is_coordinator(self) -> bool:
        return "coordinator" in self.roles

    @property
    def is_owner(self) -> bool:
        return "owner" in self.roles

    # A Group role is not enough to decide for a Mission (core/commands/authority.py):
    # a control is shown only to whom the pipeline would let use it.
    def owns(self, mission) -> bool:
        return self.is_owner and self.principal.id == mission.owner_id

    def coordinates(self, mission) -> bool:
        return self.is_coordinator and self.principal.id in authority.coordinators(mission)


def viewer(user, group_id: str) -> Viewer:
    principal = user_principal(user)
    try:
        member = principals.membership(group_id, principal)
    except ProtocolError:  # NOT_A_MEMBER, for a Group that does not exist too
        raise NotFound(group_id) from None
    return Viewer(principal, group_id, member.roles, member.epoch)


def memberships(user) -> list:
    """The user's live memberships, each with its Group."""
    return list(Membership.objects.filter(principal=user_principal(user).id, active=True)
                .select_related("group").order_by("group__slug"))
