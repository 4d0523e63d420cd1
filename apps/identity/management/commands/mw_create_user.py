from apps.identity import registry
from apps.ledger.operator import OperatorCommand


class Command(OperatorCommand):
    help = "Create a human user (or reset its password)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--password", required=True)

    def run(self, username, password, **options):
        user = registry.create_user(username, password)
        return {"username": user.username, "principal": f"user:{user.username}"}
