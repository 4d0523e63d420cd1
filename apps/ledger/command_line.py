"""How every mw_* command reads its command line: argparse as Django's BaseCommand sets it
up, with one difference, made here once for all of them (OperatorCommand uses it).

argparse decides what a word is before it knows where the word stands: any word that
begins with "-" and is not a negative number is taken for an option. So
`--public-key -abc...` fails with "expected one argument", although one base64url key in
64 begins with "-". Here the word right after an option that takes exactly one value is
that value, whatever it begins with, unless it is itself one of the command's options
(`--card`, `--card=FILE`, an abbreviation argparse accepts, `-h`) or `--`: then the value
is missing, and argparse says so as before. The pair is handed on as `--option=VALUE`,
argparse's own form for a value that begins with "-".

Positional values (an agent id, a group slug) that begin with "-" go after `--`, which
ends the options, as argparse has it; a refusal that may come from such a word says so.
"""

import re
import sys

from django.core.management.base import CommandParser

NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's: a value, not an option


class OperatorParser(CommandParser):
    # Set by a command whose command line may hold a secret by mistake (mw_create_user):
    # a refusal then never repeats the words it did not understand.
    quiet = False

    def parse_known_args(self, args=None, namespace=None):
        words = list(sys.argv[1:] if args is None else args)
        self._strays = []
        return super().parse_known_args(self._join_dash_values(words), namespace)

    def error(self, message):
        kind = message.split(":", 1)[0]
        if self.quiet and kind in ("unrecognized arguments", "ambiguous option"):
            message = f"{kind} (not repeated here, in case one is a password)"
        strays = getattr(self, "_strays", [])
        if strays and kind in ("unrecognized arguments",
                               "the following arguments are required"):
            word = "a word" if self.quiet else strays[0]
            message += (f"; {word} begins with '-' but is no option of this command: an argument "
                        f"that begins with '-' goes after '--', which ends the options "
                        f"(e.g. {self.prog} [OPTIONS] -- -VALUE)")
        super().error(message)

    def _join_dash_values(self, words: list[str]) -> list[str]:
        joined: list[str] = []
        index = 0
        while index < len(words):
            word = words[index]
            if word == "--":
                return joined + words[index:]
            following = words[index + 1] if index + 1 < len(words) else None
            if (following is not None and following.startswith(tuple(self.prefix_chars))
                    and self._takes_one_value(word) and not self._names_option(following)):
                joined.append(f"{word}={following}")
                index += 2
                continue
            if self._is_stray(word):
                self._strays.append(word)
            joined.append(word)
            index += 1
        return joined

    def _matching(self, name: str) -> list:
        """The option strings `name` stands for: itself, or those it abbreviates."""
        if name in self._option_string_actions:
            return [name]
        if self.allow_abbrev and name.startswith("--") and len(name) > 2:
            return [option for option in self._option_string_actions
                    if option.startswith(name)]
        return []

    def _takes_one_value(self, word: str) -> bool:
        """An option written without '=' whose action needs exactly one value."""
        if "=" in word or not word.startswith(tuple(self.prefix_chars)):
            return False
        options = self._matching(word)
        return (len(options) == 1
                and self._option_string_actions[options[0]].nargs in (None, 1))

    def _names_option(self, word: str) -> bool:
        if word == "--" or word in self._option_string_actions:
            return True
        return word.startswith("--") and bool(self._matching(word.split("=", 1)[0]))

    def _is_stray(self, word: str) -> bool:
        """A word argparse will take for an option that this command does not have."""
        return (len(word) > 1 and word.startswith(tuple(self.prefix_chars)) and " " not in word
                and not NEGATIVE_NUMBER.match(word) and not self._names_option(word)
                and not self._matching(word[:2]))
