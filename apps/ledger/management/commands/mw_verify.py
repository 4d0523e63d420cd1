import json

from django.core.management.base import CommandError

from apps.ledger.models import ArchivedEvent, Event, Group
from apps.ledger.operator import OperatorCommand
from apps.ledger.verify import verify_group


class Command(OperatorCommand):
    help = ("Recompute the Group's hash chain across the archive and the online log and "
            "rebuild every projection from it in memory; compare with the live tables and the "
            "stored snapshots. Exits non-zero on any difference.")

    def add_arguments(self, parser):
        parser.add_argument("group_id")

    def run(self, group_id, **options):
        if not Group.objects.filter(id=group_id).exists():
            raise CommandError(f"NOT_FOUND: no Group {group_id}")
        problems = verify_group(group_id)
        online = Event.objects.filter(group_id=group_id).count()
        archived = ArchivedEvent.objects.filter(group_id=group_id).count()
        result = {"groupId": group_id, "events": online + archived, "archivedEvents": archived,
                  "ok": not problems, "problems": problems}
        if problems:
            self.stdout.write(json.dumps(result))
            raise CommandError(f"{len(problems)} problem(s) in Group {group_id}")
        return result
