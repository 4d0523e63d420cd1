from apps.identity import registry
from apps.ledger.models import Group
from apps.ledger.operator import OperatorCommand
from mission_weave.protocol.errors import ProtocolError


class Command(OperatorCommand):
    help = "Admit agent:<id> or user:<name> to a Group with roles (or change its roles)."

    def add_arguments(self, parser):
        parser.add_argument("group_id")
        parser.add_argument("principal")
        parser.add_argument("--roles", required=True, help="comma list: coordinator,worker,...")

    def run(self, group_id, principal, roles, **options):
        group = Group.objects.filter(id=group_id).first()
        if group is None:
            raise ProtocolError("NOT_FOUND", f"no Group {group_id}")
        member = registry.add_member(group, principal, [r for r in roles.split(",") if r])
        return {"groupId": group.id, "principal": member.principal, "roles": member.roles,
                "membershipEpoch": member.epoch}
