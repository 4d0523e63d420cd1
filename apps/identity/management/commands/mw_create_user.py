import argparse
import getpass
import os
import sys

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.core.validators import validate_email
from django.db import transaction

from apps.identity import registry
from apps.ledger.operator import OperatorCommand
from mission_weave.core.jsonschema_check import check
from mission_weave.protocol.errors import ProtocolError

ENVIRONMENT = "MW_USER_PASSWORD"
THREE_WAYS = (f"give it on standard input with --password-stdin (its first line), in the "
              f"environment variable {ENVIRONMENT}, or at the prompt by running the command "
              f"from a terminal")


class RefusePassword(argparse.Action):
    """The old --password: refused, its value swallowed so that no message repeats it."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"--password is not accepted: a password on the command line is seen "
                     f"by ps and kept in the shell's history; {THREE_WAYS}")


class Command(OperatorCommand):
    help = ("Create a human user, or reset its password. The password is never an argument: "
            "with --password-stdin it is the first line of standard input; else the "
            f"environment variable {ENVIRONMENT}; else, from a terminal, a prompt (asked "
            "twice). Prints {username, principal, email}.")
    stealth_options = ("stdin",)  # call_command(..., stdin=StringIO(...)), as createsuperuser

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.quiet = True  # a refused word may be a password typed by habit
        return parser

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--email", metavar="ADDRESS",
                            help="the user's e-mail address (kept as it is when not given)")
        parser.add_argument("--password-stdin", action="store_true",
                            help="read the password from the first line of standard input")
        parser.add_argument("--password", nargs="?", action=RefusePassword,
                            help=argparse.SUPPRESS)

    def run(self, username, email=None, password_stdin=False, stdin=None, **options):
        check(registry.NAME, username, "VALIDATION_ERROR", "username")
        if email is not None:
            try:
                validate_email(email)
            except ValidationError:
                raise ProtocolError("VALIDATION_ERROR",
                                    f"--email {email!r} is not an e-mail address") from None
        password = self._password(stdin or sys.stdin, password_stdin)
        with transaction.atomic():
            user = registry.create_user(username, password)
            if email is not None:
                user.email = email
                user.save(update_fields=["email"])
        return {"username": user.username, "principal": f"user:{user.username}",
                "email": user.email}

    def _password(self, stdin, from_stdin: bool) -> str:
        if from_stdin:
            line = stdin.readline() if stdin is not None else ""
            password = line.removesuffix("\n").removesuffix("\r")
            if not password:
                raise CommandError("--password-stdin: the first line of standard input is "
                                   "empty; nothing changed")
            return password
        if ENVIRONMENT in os.environ:
            if not os.environ[ENVIRONMENT]:
                raise CommandError(f"{ENVIRONMENT} is set but empty; nothing changed")
            return os.environ[ENVIRONMENT]
        if stdin is not None and stdin.isatty():
            return self._prompt()
        raise CommandError(f"no password given (and standard input is not a terminal to ask "
                           f"on): {THREE_WAYS}; nothing changed")

    def _prompt(self) -> str:
        try:
            first = getpass.getpass("Password: ")
            second = getpass.getpass("Password (again): ")
        except (EOFError, KeyboardInterrupt):
            raise CommandError("no password entered; nothing changed") from None
        if first != second:
            raise CommandError("the two passwords differ; nothing changed")
        if not first:
            raise CommandError("the password is empty; nothing changed")
        return first
