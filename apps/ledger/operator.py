"""What every mw_* management command shares: one JSON object on stdout, and a clear
message with a non-zero exit on bad input (PROTOCOL §6)."""

import json

from django.core.management.base import BaseCommand, CommandError

from mission_weave.protocol.errors import ProtocolError


class OperatorCommand(BaseCommand):
    def handle(self, *args, **options):
        try:
            result = self.run(*args, **options)
        except ProtocolError as error:
            raise CommandError(f"{error.code}: {error.message}")
        self.stdout.write(json.dumps(result))

    def run(self, *args, **options) -> dict:
        raise NotImplementedError
