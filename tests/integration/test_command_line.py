"""The operator commands' command lines (PROTOCOL §6; issue 24).

mw_create_user takes no password as an argument (ps and the shell's history would keep
it): it reads it from --password-stdin, else MW_USER_PASSWORD, else a prompt on a
terminal (asked twice), else refuses saying the three ways; `--password` is refused
without repeating it. --email sets the address.

Every mw_* command (apps/ledger/command_line.py) takes an option's value even when it
begins with "-", as one base64url key in 64 does; a truly missing value is still named;
a positional value that begins with "-" goes after "--", and the refusal says so."""

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import global_settings
from django.contrib.auth import get_user_model
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError
from django.db import connection

from apps.identity.models import Agent, AgentKey
from apps.ledger.models import Group
from mission_weave.protocol import canonical

ROOT = Path(__file__).resolve().parents[2]
SECRET = "correct horse battery staple 24"
User = get_user_model()


def command(name: str, *args, **options) -> dict:
    out = io.StringIO()
    call_command(name, *args, stdout=out, **options)
    return json.loads(out.getvalue())


def refused(name: str, *args, **options) -> str:
    with pytest.raises(CommandError) as raised:
        command(name, *args, **options)
    return str(raised.value)


def has_password(username: str, password: str) -> bool:
    return User.objects.get(username=username).check_password(password)


def dash_key() -> str:
    """A base64url public key that begins with "-" (one in 64 do)."""
    while True:
        public = canonical.public_key_b64url(Ed25519PrivateKey.generate())
        if public.startswith("-"):
            return public


@pytest.fixture
def no_password_in_environment(monkeypatch):
    monkeypatch.delenv("MW_USER_PASSWORD", raising=False)


@pytest.fixture
def any_hasher(settings):
    """A real manage.py hashes with Django's default hasher, not the tests' fast one."""
    settings.PASSWORD_HASHERS = [*settings.PASSWORD_HASHERS, *global_settings.PASSWORD_HASHERS]


# --- a real manage.py against this test's database --------------------------------------

def command_line_env(**extra) -> dict:
    url = urlsplit(os.environ["DATABASE_URL"])
    database = urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))
    environment = {**os.environ, "DATABASE_URL": database, **extra}
    environment.pop("MW_USER_PASSWORD", None)
    environment.update(extra)
    return environment


def manage(*args, stdin: str | None = None, **extra_env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT,
                          env=command_line_env(**extra_env), input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=180)


def manage_on_a_terminal(args: list, answers: list[str]) -> tuple[int, str]:
    """manage.py with a terminal of its own (as an operator's shell gives it): each answer
    is typed after the next prompt. Returns the exit status and all the terminal showed."""
    pid, terminal = pty.fork()
    if pid == 0:  # the child: manage.py on the terminal's slave side
        try:
            os.chdir(ROOT)
            os.execve(sys.executable, [sys.executable, "manage.py", *args], command_line_env())
        finally:
            os._exit(127)
    shown, deadline, pending = b"", time.monotonic() + 180, list(answers)
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([terminal], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(terminal, 4096)
            except OSError:  # EIO: the child has gone, and the terminal with it
                break
            if not chunk:
                break
            shown += chunk
            if pending and shown.count(b"Password") > len(answers) - len(pending):
                os.write(terminal, pending.pop(0).encode() + b"\n")
    finally:
        os.close(terminal)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), shown.decode(errors="replace")


# --- mw_create_user: where the password comes from --------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_password_on_the_command_line_is_refused_without_repeating_it(any_hasher):
    option = manage("mw_create_user", "alice", "--password", SECRET)
    word = manage("mw_create_user", "alice", SECRET)  # an extra word may be one too

    for result in (option, word):
        assert result.returncode != 0
        assert SECRET not in result.stdout + result.stderr
    assert "--password is not accepted" in option.stderr
    assert "seen by ps" in option.stderr
    assert "--password-stdin" in option.stderr and "MW_USER_PASSWORD" in option.stderr
    assert "unrecognized arguments (not repeated here" in word.stderr
    assert not User.objects.filter(username="alice").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("args", [("--password", SECRET), (f"--password={SECRET}",)])
def test_call_command_refuses_the_password_option_too(args, no_password_in_environment):
    message = refused("mw_create_user", "alice", *args, stdin=io.StringIO(""))

    assert "--password is not accepted" in message and SECRET not in message
    assert not User.objects.filter(username="alice").exists()


@pytest.mark.django_db(transaction=True)
def test_password_stdin_through_a_pipe_sets_it_and_shows_it_nowhere(any_hasher):
    result = manage("mw_create_user", "bob", "--email", "bob@example.com",
                    "--password-stdin", stdin=f"{SECRET}\n")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"username": "bob", "principal": "user:bob",
                                         "email": "bob@example.com"}
    assert SECRET not in result.stdout + result.stderr
    assert has_password("bob", SECRET)


@pytest.mark.django_db
@pytest.mark.parametrize("typed", [f"{SECRET}\nthe second line\n", f"{SECRET}\r\n", SECRET])
def test_password_stdin_takes_the_first_line_without_its_newline(typed,
                                                                 no_password_in_environment):
    printed = command("mw_create_user", "carol", "--password-stdin", stdin=io.StringIO(typed))

    assert printed["principal"] == "user:carol" and SECRET not in json.dumps(printed)
    assert has_password("carol", SECRET)


@pytest.mark.django_db
@pytest.mark.parametrize("typed", ["", "\n", "\r\n"])
def test_an_empty_first_line_is_refused(typed, no_password_in_environment):
    message = refused("mw_create_user", "dave", "--password-stdin", stdin=io.StringIO(typed))

    assert "--password-stdin: the first line of standard input is empty" in message
    assert not User.objects.filter(username="dave").exists()


@pytest.mark.django_db
def test_the_environment_variable_when_there_is_no_password_stdin(monkeypatch):
    monkeypatch.setenv("MW_USER_PASSWORD", SECRET)

    printed = command("mw_create_user", "erin", stdin=io.StringIO("not this\n"))

    assert printed == {"username": "erin", "principal": "user:erin", "email": ""}
    assert has_password("erin", SECRET)
    # --password-stdin says where it is: standard input wins over the environment.
    command("mw_create_user", "erin", "--password-stdin", stdin=io.StringIO("from stdin\n"))
    assert has_password("erin", "from stdin")


@pytest.mark.django_db
def test_an_empty_environment_variable_is_refused(monkeypatch):
    monkeypatch.setenv("MW_USER_PASSWORD", "")

    assert "MW_USER_PASSWORD is set but empty" in refused("mw_create_user", "frank",
                                                          stdin=io.StringIO(""))
    assert not User.objects.filter(username="frank").exists()


@pytest.mark.django_db
def test_no_password_and_no_terminal_is_refused_naming_the_three_ways(
        no_password_in_environment):
    message = refused("mw_create_user", "grace", stdin=io.StringIO(""))

    assert "no password given" in message
    assert "--password-stdin" in message and "MW_USER_PASSWORD" in message
    assert "terminal" in message and "\n" not in message
    assert not User.objects.filter(username="grace").exists()


@pytest.mark.django_db(transaction=True)
def test_on_a_terminal_it_asks_twice_and_does_not_echo(any_hasher):
    status, shown = manage_on_a_terminal(["mw_create_user", "heidi"], [SECRET, SECRET])

    assert status == 0, shown
    assert shown.count("Password") == 2
    assert SECRET not in shown
    assert '"principal": "user:heidi"' in shown
    assert has_password("heidi", SECRET)


@pytest.mark.django_db(transaction=True)
def test_on_a_terminal_two_different_answers_change_nothing(any_hasher):
    status, shown = manage_on_a_terminal(["mw_create_user", "ivan"], [SECRET, "a typo"])

    assert status != 0
    assert "the two passwords differ" in shown and SECRET not in shown
    assert not User.objects.filter(username="ivan").exists()


@pytest.mark.django_db
def test_email_is_set_kept_on_a_reset_and_checked(no_password_in_environment):
    command("mw_create_user", "judy", "--email", "judy@example.com", "--password-stdin",
            stdin=io.StringIO("first\n"))
    assert User.objects.get(username="judy").email == "judy@example.com"

    printed = command("mw_create_user", "judy", "--password-stdin",
                      stdin=io.StringIO("second\n"))

    assert printed["email"] == "judy@example.com"  # a password reset keeps the address
    assert has_password("judy", "second")
    message = refused("mw_create_user", "judy", "--email", "not-an-address",
                      "--password-stdin", stdin=io.StringIO("third\n"))
    assert message == "VALIDATION_ERROR: --email 'not-an-address' is not an e-mail address"
    assert has_password("judy", "second")


# --- every mw_* command: a value that begins with "-" ------------------------------------

BASE_OPTIONS = {"help", "version", "verbosity", "settings", "pythonpath", "traceback",
                "no_color", "force_color", "skip_checks"}


def operator_commands() -> dict:
    return {name: load_command_class(app, name) for name, app in sorted(get_commands().items())
            if name.startswith("mw_") and app.startswith("apps.") and app != "apps.bench"}


def value_options():
    """(command, option) for every option of an mw_* command that takes one string."""
    for name, command_object in operator_commands().items():
        parser = command_object.create_parser("manage.py", name)
        for action in parser._actions:
            if (action.option_strings and action.dest not in BASE_OPTIONS
                    and action.nargs is None and action.type is None
                    and action.choices is None and action.help != "==SUPPRESS=="):
                yield name, max(action.option_strings, key=len)


def parse(name: str, *words) -> dict:
    command_object = operator_commands()[name]
    parser = command_object.create_parser("manage.py", name)
    positionals = [action for action in parser._actions if not action.option_strings]
    required = [word for action in parser._actions
                if action.required and action.option_strings
                and action.option_strings[0] not in words
                for word in (action.option_strings[0], "worker")]
    return vars(parser.parse_args(["x"] * len(positionals) + required + list(words)))


def test_the_value_options_are_all_found():
    assert set(value_options()) >= {
        ("mw_create_group", "--name"), ("mw_register_agent", "--public-key"),
        ("mw_register_agent", "--public-key-file"), ("mw_register_agent", "--card"),
        ("mw_register_agent", "--revoke-key"), ("mw_add_member", "--roles"),
        ("mw_create_user", "--email"), ("mw_rotate_authority_key", "--seed-file")}


@pytest.mark.parametrize("name,option", sorted(set(value_options())))
def test_every_option_takes_a_value_that_begins_with_a_dash(name, option):
    dest = option.lstrip("-").replace("-", "_")
    for value in ("-abc_DEF-123", "--abc", "-vabc", "-h-is-a-value"):
        assert parse(name, option, value)[dest] == value
        assert parse(name, f"{option}={value}")[dest] == value
    # A value that is missing is still named, whatever follows.
    for following in ([], ["--help"], ["-h"], ["--"], ["--verbosity", "2"]):
        with pytest.raises(CommandError) as raised:
            parse(name, option, *following)
        assert f"argument {option}: expected one argument" in str(raised.value)


@pytest.mark.django_db(transaction=True)
def test_a_key_that_begins_with_a_dash_registers_as_a_separate_word():
    public, other = dash_key(), dash_key()

    word = manage("mw_register_agent", "dash-agent", "--public-key", public)

    assert word.returncode == 0, word.stderr
    assert json.loads(word.stdout)["keyId"] == "dash-agent#1"
    assert AgentKey.objects.get(key_id="dash-agent#1").public_key == public
    joined = manage("mw_register_agent", "dash-agent", "--add-key", f"--public-key={other}")
    assert joined.returncode == 0, joined.stderr
    assert AgentKey.objects.get(key_id="dash-agent#2").public_key == other
    missing = manage("mw_register_agent", "dash-agent", "--public-key")
    assert missing.returncode != 0
    assert "argument --public-key: expected one argument" in missing.stderr


@pytest.mark.django_db
def test_dash_values_reach_each_command(tmp_path, monkeypatch, no_password_in_environment):
    monkeypatch.chdir(tmp_path)
    Path("-key.pub").write_text(dash_key() + "\n")
    Path("-card.json").write_text(json.dumps({"version": "1", "maxConcurrency": 2,
                                              "capabilities": []}))

    assert command("mw_create_group", "dashes", "--name", "-the dash group-")["created"]
    # By id: the test's one transaction may not read every shard before it writes the
    # agents' reference table (Citus refuses that order in a transaction).
    assert Group.objects.get(id="grp_dashes").name == "-the dash group-"
    printed = command("mw_register_agent", "file-agent", "--public-key-file", "-key.pub",
                      "--card", "-card.json")
    assert printed["card"]["maxConcurrency"] == 2
    assert Agent.objects.get(id="file-agent").card["maxConcurrency"] == 2
    assert "roles must be among" in refused("mw_add_member", "grp_dashes", "agent:file-agent",
                                            "--roles", "-worker")
    assert "has no key -x" in refused("mw_register_agent", "file-agent", "--revoke-key", "-x")
    command("mw_create_user", "kim", "--email", "-kim@example.com", "--password-stdin",
            stdin=io.StringIO("pw\n"))
    assert User.objects.get(username="kim").email == "-kim@example.com"


@pytest.mark.django_db
def test_a_positional_value_that_begins_with_a_dash_goes_after_a_double_dash():
    message = refused("mw_create_group", "-slug")

    assert "the following arguments are required: slug" in message
    assert "-slug begins with '-'" in message and "after '--'" in message
    # After "--" it is the slug, and reaches the slug's own check.
    assert refused("mw_create_group", "--name", "-n", "--", "-slug").startswith(
        "VALIDATION_ERROR: group slug")
    assert "after '--'" in refused("mw_verify", "grp_x", "-extra")
