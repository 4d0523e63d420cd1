"""`manage.py mw_webhook add GROUP URL [--events type,...] [--format json|slack]`,
`list [GROUP]`, `remove ID`, `rotate ID`: a Group's outgoing webhooks, for the operator.

`add` and `rotate` print the new signing secret once, in their JSON answer: it is made
by the server (never read from the command line, where it would stay in the shell's
history and the process list) and is not shown again."""

from django.utils import timezone

from apps.ledger.operator import OperatorCommand
from apps.webhooks import registry

OPERATOR = "operator"  # who made a webhook from the command line


class Command(OperatorCommand):
    help = "Add, list, remove or rotate the secret of a Group's outgoing webhooks."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="a new webhook; prints its secret once")
        add.add_argument("group_id")
        add.add_argument("url")
        add.add_argument("--events", default="",
                         help="comma list of event types (default: every event)")
        add.add_argument("--format", default="json", choices=["json", "slack"])
        listing = actions.add_parser("list", help="the webhooks (of one Group)")
        listing.add_argument("group_id", nargs="?")
        remove = actions.add_parser("remove", help="a webhook and its delivery log")
        remove.add_argument("webhook_id")
        rotate = actions.add_parser("rotate", help="a new secret (the old one signs 24 h more)")
        rotate.add_argument("webhook_id")

    def run(self, action, **options):
        if action == "add":
            webhook, secret = registry.create(
                options["group_id"], options["url"], options["events"].split(","),
                options["format"], OPERATOR, timezone.now())
            return {**registry.describe(webhook), "secret": secret,
                    "note": "the secret is shown once: keep it with the receiver"}
        if action == "list":
            return {"webhooks": registry.listing(options["group_id"])}
        if action == "remove":
            webhook = registry.remove(options["webhook_id"])
            return {"removed": webhook.id, "groupId": webhook.group_id}
        webhook = registry.get(options["webhook_id"])
        webhook, secret = registry.rotate(webhook.id, webhook.group_id, timezone.now())
        return {**registry.describe(webhook), "secret": secret,
                "previousSecretValidUntil": webhook.previous_secret_until.isoformat(),
                "note": "the secret is shown once: keep it with the receiver"}
