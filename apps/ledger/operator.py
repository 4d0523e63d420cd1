"""What every mw_* management command shares: one JSON object on stdout, and a clear
message with a non-zero exit on bad input (PROTOCOL §6)."""

import json

from django.core.management.base import BaseCommand, CommandError

from apps.ledger.command_line import OperatorParser
from mission_weave.protocol.errors import ProtocolError


class OperatorCommand(BaseCommand):
    def create_parser(self, prog_name, subcommand, **kwargs):
        """Django's parser, made an OperatorParser (apps/ledger/command_line.py): an
        option's value may begin with '-'. It adds behaviour only, no state."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.__class__ = OperatorParser
        return parser

    def handle(self, *args, **options):
        try:
            result = self.run(*args, **options)
        except ProtocolError as error:
            raise CommandError(f"{error.code}: {error.message}") from None
        self.stdout.write(json.dumps(result))

    def run(self, *args, **options) -> dict:
        raise NotImplementedError
