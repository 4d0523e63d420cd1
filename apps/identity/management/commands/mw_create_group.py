from apps.identity import registry
from apps.ledger.operator import OperatorCommand


class Command(OperatorCommand):
    help = "Create a Group (idempotent by slug). Prints {groupId}."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def run(self, slug, name, **options):
        group, created = registry.create_group(slug, name)
        return {"groupId": group.id, "slug": group.slug, "created": created}
