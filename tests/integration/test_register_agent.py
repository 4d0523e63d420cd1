"""`mw_register_agent` (PROTOCOL §6) as an operator meets it: a base64url key that begins
with "-" (one in 64), given as `--public-key KEY`, `--public-key=KEY` or from
`--public-key-file FILE` (the key itself or an SDK JSON key file); exactly one of the
two; an Agent Card refused with what is wrong and an example of a valid one; keys the
Ed25519 checks refuse (wrong length, small order, non-canonical); and key rotation:
--add-key, --revoke-key, the keys shown."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from apps.identity import registry
from apps.identity.models import Agent, AgentKey
from mission_weave.protocol import canonical
from mission_weave.protocol.errors import ProtocolError
from mission_weave.sdk.keys import AgentKey as SdkKey

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = json.dumps(registry.CARD_EXAMPLE)
CARD = {"version": "2", "maxConcurrency": 3, "capabilities": [{"id": "research", "version": "1"}]}


def dash_key() -> Ed25519PrivateKey:
    """A key whose base64url public half begins with "-" (the one in 64 argparse trips on)."""
    while True:
        key = Ed25519PrivateKey.generate()
        if canonical.public_key_b64url(key).startswith("-"):
            return key


def register(*args) -> dict:
    out = io.StringIO()
    call_command("mw_register_agent", *args, stdout=out)
    return json.loads(out.getvalue())


def refused(*args) -> str:
    with pytest.raises(CommandError) as raised:
        register(*args)
    return str(raised.value)


def registered_key(agent_id: str) -> str:
    return AgentKey.objects.get(agent_id=agent_id).public_key


@pytest.fixture
def key():
    return dash_key()


@pytest.fixture
def public(key):
    return canonical.public_key_b64url(key)


# --- --public-key=KEY --------------------------------------------------------------------

@pytest.mark.django_db
def test_a_key_beginning_with_a_dash_is_taken_with_an_equals_sign(public):
    result = register("dash-agent", f"--public-key={public}")

    assert (result["agentId"], result["keyId"]) == ("dash-agent", "dash-agent#1")
    assert registered_key("dash-agent") == public


@pytest.mark.django_db
def test_a_key_beginning_with_a_dash_is_taken_as_a_separate_word_too(public):
    result = register("dash-agent", "--public-key", public)

    assert (result["agentId"], result["keyId"]) == ("dash-agent", "dash-agent#1")
    assert registered_key("dash-agent") == public


def _command_line_env() -> dict:
    """The environment for a real `manage.py` against this test's database."""
    url = urlsplit(os.environ["DATABASE_URL"])
    database = urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))
    return {**os.environ, "DATABASE_URL": database}


def manage(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "mw_register_agent", *args], cwd=ROOT,
                          env=_command_line_env(), capture_output=True, text=True, timeout=120)


def test_the_command_line_help_names_both_ways_and_the_equals_sign():
    result = manage("--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "--public-key=KEY" in text and "--public-key-file" in text


# --- exactly one of --public-key and --public-key-file ------------------------------------

@pytest.mark.django_db
def test_neither_key_option_is_refused_clearly():
    message = refused("no-key-agent")
    assert "exactly one of --public-key=KEY and --public-key-file FILE" in message
    assert "neither" in message


@pytest.mark.django_db
def test_both_key_options_are_refused_clearly(public, tmp_path):
    (tmp_path / "key").write_text(public)
    message = refused("two-key-agent", f"--public-key={public}",
                      "--public-key-file", str(tmp_path / "key"))
    assert "exactly one" in message and "both" in message
    assert not Agent.objects.filter(id="two-key-agent").exists()


# --- --public-key-file FILE ----------------------------------------------------------------

@pytest.mark.django_db
def test_a_file_holding_the_key_itself(public, tmp_path):
    path = tmp_path / "agent.pub"
    path.write_text(f"{public}\n")

    assert register("file-agent", "--public-key-file", str(path))["keyId"] == "file-agent#1"
    assert registered_key("file-agent") == public


@pytest.mark.django_db
def test_an_sdk_key_file_gives_the_public_half_of_its_private_key(key, public, tmp_path):
    path = tmp_path / "sdk-agent.json"
    path.write_text(json.dumps({"agentId": "sdk-agent", "keyId": "sdk-agent#1",
                                "groupId": "grp_x",
                                "privateKey": canonical.private_key_b64url(key)}))

    register("sdk-agent", f"--public-key-file={path}")

    assert registered_key("sdk-agent") == public
    # The SDK signs with that file; the server holds the matching public key.
    signed = SdkKey.load(path).sign({"hello": "world"})
    assert canonical.verify(signed,
                            canonical.public_key_from_b64url(registered_key("sdk-agent")))


@pytest.mark.django_db
def test_a_json_key_file_with_a_public_key(public, tmp_path):
    path = tmp_path / "k.json"
    path.write_text(json.dumps({"agentId": "pub-agent", "publicKey": public}))

    register("pub-agent", "--public-key-file", str(path))

    assert registered_key("pub-agent") == public


@pytest.mark.parametrize("content,words", [
    (None, "cannot be read"),
    ("", "is empty"),
    ("{not json", "is not valid JSON"),
    ('{"agentId": "a"}', "needs a publicKey or a privateKey"),
    ('{"privateKey": "abc"}', "privateKey is not a raw 32-byte Ed25519 key"),
    ('{"privateKey": 7}', "privateKey must be a base64url string"),
    ("two words", "more than one word"),
])
@pytest.mark.django_db
def test_a_bad_key_file_says_what_is_wrong(tmp_path, content, words):
    path = tmp_path / "key"
    if content is not None:
        path.write_text(content)

    message = refused("bad-file-agent", "--public-key-file", str(path))

    assert f"public key file {path}" in message and words in message
    assert not Agent.objects.filter(id="bad-file-agent").exists()


@pytest.mark.django_db
def test_a_key_file_whose_halves_disagree_is_refused(key, tmp_path):
    path = tmp_path / "k.json"
    path.write_text(json.dumps({
        "privateKey": canonical.private_key_b64url(key),
        "publicKey": canonical.public_key_b64url(Ed25519PrivateKey.generate())}))

    assert "publicKey is not the public half of privateKey" in refused(
        "odd-agent", "--public-key-file", str(path))


# --- Agent Card errors show a valid example ------------------------------------------------

@pytest.mark.django_db
def test_a_valid_card_is_registered(public, tmp_path):
    path = tmp_path / "card.json"
    path.write_text(json.dumps(CARD))

    assert register("card-agent", f"--public-key={public}", "--card", str(path))["card"] == CARD
    assert Agent.objects.get(id="card-agent").card == CARD


@pytest.mark.parametrize("content,words", [
    (None, "cannot read the Agent Card file"),
    ("{version: 1}", "is not JSON"),
    ("[]", "is not of type 'object'"),
    ('{"version": "1", "capabilities": []}', "'maxConcurrency' is required"),
    ('{"version": "1", "maxConcurrency": 2, "capabilities": ["research"]}', "capabilities[0]"),
    ('{"version": "1", "maxConcurrency": 0, "capabilities": []}', "maxConcurrency"),
    ('{"version": "1", "maxConcurrency": 2, "capabilities": [], "colour": "red"}', "colour"),
])
@pytest.mark.django_db
def test_a_bad_card_says_what_is_wrong_and_shows_a_valid_one(public, tmp_path, content, words):
    path = tmp_path / "card.json"
    if content is not None:
        path.write_text(content)

    message = refused("bad-card-agent", f"--public-key={public}", "--card", str(path))

    assert message.startswith("VALIDATION_ERROR: ")
    assert words in message
    assert EXAMPLE in message
    assert not Agent.objects.filter(id="bad-card-agent").exists()


def test_the_example_is_itself_a_valid_card():
    assert registry.check_card(json.loads(EXAMPLE)) == registry.CARD_EXAMPLE


@pytest.mark.django_db
def test_registering_through_the_registry_shows_the_example_too(public):
    """registry.register_agent is where every Agent Card is checked (the command, mw_demo,
    the SDK's test servers); its refusal carries the example in message and details."""
    with pytest.raises(ProtocolError) as raised:
        registry.register_agent("api-agent", public, {"version": "1"})

    error = raised.value
    assert error.code == "VALIDATION_ERROR"
    assert "Agent Card" in error.message and EXAMPLE in error.message
    assert error.details["example"] == registry.CARD_EXAMPLE
    assert error.details == {"path": "(root)", "example": registry.CARD_EXAMPLE}


# --- keys the checks refuse (sdk/src/mission_weave/protocol/canonical.py) ---------------------

@pytest.mark.parametrize("raw,words", [
    (bytes(31), "an Ed25519 public key is 32 bytes; this one is 31"),
    (bytes(33), "an Ed25519 public key is 32 bytes; this one is 33"),
    (bytes.fromhex("01" + "00" * 31), "a point of small order"),
    (bytes(32), "a point of small order"),
    (bytes.fromhex("ee" + "ff" * 30 + "7f"), "not a canonical point encoding"),
])
@pytest.mark.django_db
def test_a_key_the_checks_refuse_is_not_registered_and_says_why(raw, words):
    message = refused("weak-agent", f"--public-key={canonical.b64url(raw)}")

    assert message.startswith("VALIDATION_ERROR: public key: ")
    assert words in message
    assert not Agent.objects.filter(id="weak-agent").exists()


@pytest.mark.django_db
def test_a_padded_key_is_refused_saying_how_to_write_it(public):
    message = refused("padded-agent", f"--public-key={public}=")
    assert "canonical base64url" in message and "padding" in message


# --- --add-key and --revoke-key --------------------------------------------------------------

def other_public() -> str:
    return canonical.public_key_b64url(Ed25519PrivateKey.generate())


@pytest.mark.django_db
def test_add_key_gives_a_registered_agent_its_next_key_id_and_shows_its_keys(public):
    register("rot-agent", f"--public-key={public}")
    second = other_public()

    result = register("rot-agent", "--add-key", f"--public-key={second}")

    assert result["keyId"] == "rot-agent#2"
    assert [(k["keyId"], k["publicKey"], k["active"], k["revokedAt"]) for k in result["keys"]] \
        == [("rot-agent#1", public, True, None), ("rot-agent#2", second, True, None)]
    assert register("rot-agent", "--add-key", f"--public-key={second}")["keyId"] == "rot-agent#2"
    assert AgentKey.objects.filter(agent_id="rot-agent").count() == 2


@pytest.mark.django_db
def test_add_key_refuses_an_agent_that_is_not_registered(public):
    message = refused("typo-agent", "--add-key", f"--public-key={public}")

    assert message.startswith("NOT_FOUND: no agent typo-agent is registered")
    assert not Agent.objects.filter(id="typo-agent").exists()


@pytest.mark.django_db
def test_revoke_key_revokes_and_a_revoked_key_cannot_come_back(public):
    register("rev-agent", f"--public-key={public}")
    register("rev-agent", "--add-key", f"--public-key={other_public()}")

    result = register("rev-agent", "--revoke-key", "rev-agent#1")

    assert (result["agentId"], result["keyId"], result["revoked"]) == \
        ("rev-agent", "rev-agent#1", True)
    assert [(k["keyId"], k["active"]) for k in result["keys"]] == \
        [("rev-agent#1", False), ("rev-agent#2", True)]
    assert result["keys"][0]["revokedAt"] is not None
    key = AgentKey.objects.get(key_id="rev-agent#1")
    assert not key.active and key.revoked_at is not None
    again = refused("rev-agent", "--add-key", f"--public-key={public}")
    assert "rev-agent#1, which was revoked" in again
    assert "revoked" in refused("rev-agent", f"--public-key={public}")
    # A new key takes the next number: ids are never reused.
    assert register("rev-agent", "--add-key", f"--public-key={other_public()}")["keyId"] == \
        "rev-agent#3"


@pytest.mark.django_db
def test_revoke_key_names_the_agents_keys_when_the_key_is_not_its(public):
    register("own-agent", f"--public-key={public}")

    message = refused("own-agent", "--revoke-key", "other-agent#1")

    assert message == ("NOT_FOUND: agent own-agent has no key other-agent#1 (its keys: "
                       "own-agent#1)")
    assert refused("ghost-agent", "--revoke-key", "ghost-agent#1") == \
        "NOT_FOUND: no agent ghost-agent is registered"
    assert AgentKey.objects.get(key_id="own-agent#1").active


@pytest.mark.django_db
def test_revoke_key_takes_no_key_option(public):
    register("mix-agent", f"--public-key={public}")

    message = refused("mix-agent", "--revoke-key", "mix-agent#1", f"--public-key={public}")

    assert "--revoke-key takes no other option (--public-key given)" in message
    assert AgentKey.objects.get(key_id="mix-agent#1").active
