"""docs/sdk.md, run as written against the live server (tests/sdk/conftest.py): the
blocks marked `<!-- sdk-doc:NAME [file=FILE] -->` are taken from the page; the files are
written to a fresh folder, the commands run there as separate processes (`python` being
this interpreter). Only the server's URL, the Group, the agent's name and the demo
coordinator's are substituted: the page's `http://127.0.0.1:8000`, `grp_demo`,
`my-worker` and `"agent:coordinator"`."""

import asyncio
import json
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.sdk.conftest import run

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "sdk.md"
BLOCK = re.compile(r"<!-- sdk-doc:(?P<name>[\w-]+)(?: file=(?P<file>\S+))? -->\s*\n"
                   r"```\w*\n(?P<body>.*?)```", re.S)


def doc_blocks(substitutions: dict) -> dict:
    """{name: (file or None, text)} of the page's marked blocks, substituted."""
    text = DOC.read_text()
    for old, new in substitutions.items():
        text = text.replace(old, new)
    found = {m["name"]: (m["file"], m["body"]) for m in BLOCK.finditer(text)}
    assert {"card", "keys", "register", "worker", "offer", "run"} <= set(found), found.keys()
    return found


def commands(text: str) -> list:
    """The command lines of a shell block (backslash continuations joined)."""
    text = text.replace("\\\n", " ")
    return [shlex.split(line) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def python(argv: list) -> list:
    assert argv[0] == "python", argv
    return [sys.executable, *argv[1:]]


def execute(argv: list, cwd: Path, env=None, timeout: float = 90) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{shlex.join(argv)} did not finish in {timeout}s:\n{error.stdout}\n"
                    f"{error.stderr}")
    assert done.returncode == 0, (f"{shlex.join(argv)} exited {done.returncode}:\n"
                                  f"{done.stdout}\n{done.stderr}")
    return done


def test_the_page_has_its_marked_blocks_and_its_python_compiles():
    blocks = doc_blocks({})
    for name in ("worker", "offer"):
        file, text = blocks[name]
        compile(text, file, "exec")
    assert "--once" in commands(blocks["run"][1])[0]


def test_the_doc_worker_runs_as_written_and_submits_its_evidence(live_group, tmp_path):
    from apps.identity import registry
    from apps.ledger.models import Group

    server, g = live_group.server, live_group.group_id
    agent = f"my-worker-{uuid.uuid4().hex[:6]}"  # agent ids are global to the database
    blocks = doc_blocks({"http://127.0.0.1:8000": server.url, "grp_demo": g,
                         "my-worker": agent,
                         # the demo coordinator, should the page name it (a delegate)
                         '"agent:coordinator"': f'"{live_group.coordinator.key.principal}"'})
    folder = tmp_path / "reader"
    folder.mkdir()
    for file, text in blocks.values():
        if file:
            (folder / file).write_text(text)
    group = Group.objects.get(id=g)
    registry.create_user("owner", "owner")  # the demo's MissionOwner, named by offer_one.py
    registry.add_member(group, "user:owner", ["owner"])

    # Step 1: the key; the two commands it prints are the page's, and register it.
    [keys_command] = commands(blocks["keys"][1])
    printed = execute(python(keys_command), folder).stdout
    key_file = folder / ".mw" / "agents" / f"{agent}.json"
    assert key_file.stat().st_mode & 0o777 == 0o600
    saved = json.loads(key_file.read_text())
    public_key = re.search(r"^public key: (\S+)$", printed, re.M)[1]
    next_steps = [shlex.split(line) for line in printed.splitlines()
                  if line.startswith("  python manage.py ")]
    page_steps = commands(blocks["register"][1].replace("<the key it printed>", public_key))
    assert next_steps == page_steps
    for step in next_steps:
        answer = execute([sys.executable, str(REPO / "manage.py"), *step[2:]], folder,
                         env=server.env)
        registered = json.loads(answer.stdout)
        if step[2] == "mw_register_agent":
            assert registered["keyId"] == saved["keyId"] == f"{agent}#1"
            assert registered["card"] == json.loads(blocks["card"][1])

    # A coordinator follows the Group, as the demo's does beside `make run`.
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "mission_weave.sdk.coordinator", "--key",
         str(live_group.coordinator.key_file), "--group", g, "--url", server.url],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Steps 3 and 4: the item, then the worker, with the page's command line.
        offered = execute([sys.executable, blocks["offer"][0]], folder).stdout
        item_id = re.search(r"^offered (\S+) of Mission (\S+) to ", offered, re.M)[1]
        [run_command] = commands(blocks["run"][1])
        assert "--once" in run_command
        worked = execute(python(run_command), folder)
        assert json.loads(worked.stdout.strip().splitlines()[-1]) == {
            "groupId": g, "workItemId": item_id, "outcome": "submitted"}
        item = run(verified(live_group, item_id), timeout=60)
    finally:
        coordinator.terminate()
        coordinator.wait(10)

    assert item["state"] in ("submitted", "verified")
    assert item["owner"] == agent
    [evidence] = item["submission"]["evidence"]
    assert evidence["producer"] == f"agent:{agent}"
    assert evidence["criteria"] == ["written"] and evidence["method"] == "self-check"
    assert evidence["artifacts"] == item["submission"]["artifacts"] != []
    # Step 4 says the demo coordinator then verifies it. It acts only on the Missions it
    # coordinates or is a delegate of (PROTOCOL §2 "who"), so step 3's Mission must name
    # it (`"delegates": ["agent:coordinator"]`; substituted above).
    assert item["state"] == "verified", "docs/sdk.md step 4: the coordinator verifies it"


async def verified(live_group, item_id: str, seconds: float = 30) -> dict:
    """The WorkItem once `verified`, or as it is after `seconds`."""
    async with live_group.client(live_group.workers[0]) as reader:
        await reader.open_session()
        deadline = asyncio.get_running_loop().time() + seconds
        while True:
            item = await reader.work_item(live_group.group_id, item_id)
            if item["state"] == "verified" or asyncio.get_running_loop().time() > deadline:
                return item
            await asyncio.sleep(0.3)
