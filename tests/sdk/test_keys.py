"""`python -m mission_weave.sdk.keys new`: a key file the SDK reads, mode 0600, never over
another, and the exact operator commands that register it."""

import json
import shlex
import subprocess
import sys

import pytest

from mission_weave.protocol import canonical
from mission_weave.sdk import keys
from mission_weave.sdk.keys import AgentKey


def new(capsys, *argv) -> str:
    keys.main(["new", *argv])
    return capsys.readouterr().out


def test_new_writes_a_private_key_file_and_prints_the_commands_to_register_it(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = new(capsys, "my-worker", "--group", "grp_demo", "--card", "card.json",
              "--roles", "worker,coordinator")

    path = tmp_path / ".mw" / "agents" / "my-worker.json"
    assert path.stat().st_mode & 0o777 == 0o600
    saved = json.loads(path.read_text())
    assert set(saved) == {"agentId", "keyId", "groupId", "privateKey"}
    key = AgentKey.load(path)
    assert (key.agent_id, key.key_id, key.group_id) == ("my-worker", "my-worker#1", "grp_demo")
    public = canonical.public_key_b64url(key.private_key)
    assert f"public key: {public}\n" in out
    lines = [shlex.split(line) for line in out.splitlines() if line.startswith("  python ")]
    assert lines == [
        ["python", "manage.py", "mw_register_agent", "my-worker", f"--public-key={public}",
         "--card", "card.json"],
        ["python", "manage.py", "mw_add_member", "grp_demo", "agent:my-worker", "--roles",
         "worker,coordinator"]]
    # The key signs what the server verifies with the printed public key.
    signed = key.sign({"hello": "world"})
    assert canonical.verify(signed, canonical.public_key_from_b64url(public))


def test_a_key_beginning_with_a_dash_is_printed_with_an_equals_sign(tmp_path, capsys,
                                                                    monkeypatch):
    while True:  # one base64url key in 64 begins with "-"
        key = keys.new_key("a1")
        if key.public_key.startswith("-"):
            break
    monkeypatch.setattr(keys, "new_key", lambda *args: key)
    out = new(capsys, "a1", "--out", str(tmp_path / "a1.json"))
    assert f"mw_register_agent a1 --public-key={key.public_key}\n" in out
    assert "mw_add_member GROUP_ID agent:a1 --roles worker" in out  # no --group given
    assert "--card FILE" in out  # and no card: it says a worker needs one


def test_an_existing_key_file_is_never_overwritten_without_force(tmp_path, capsys):
    path = tmp_path / "k.json"
    new(capsys, "a1", "--out", str(path))
    first = path.read_text()

    with pytest.raises(SystemExit) as refused:
        keys.main(["new", "a1", "--out", str(path)])
    assert "exists" in str(refused.value) and "--force" in str(refused.value)
    assert path.read_text() == first

    new(capsys, "a1", "--out", str(path), "--force", "--key-id", "a1#2")
    assert path.read_text() != first and AgentKey.load(path).key_id == "a1#2"
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.json"]


def test_an_agent_id_the_server_would_refuse_is_refused_here(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        keys.main(["new", "bad/id", "--out", str(tmp_path / "x.json")])
    assert refused.value.code == 2
    assert "agent id 'bad/id'" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("module", ["mission_weave.sdk.keys", "mission_weave.sdk.worker"])
def test_the_sdks_commands_run_without_a_warning(module):
    # The package imports none of its modules, so `python -m` runs each one fresh.
    ran = subprocess.run([sys.executable, "-W", "error", "-m", module, "--help"],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
