"""The Agent SDK stands alone: `pip install sdk/` into a bare virtualenv (no system site
packages, no Django, nothing of the server), then docs/sdk.md's ten-line worker, run
as the page runs it (tests/sdk/test_sdk_doc.py), with that virtualenv's python against
the live server (tests/sdk/conftest.py). The worker must do its job, and no `django`
module may have been imported in its process: each SDK process runs under a small
wrapper that looks at `sys.modules` when the interpreter exits.

The server's side (registering the agent, reading the item back) is done by this test
process, as the operator's `manage.py` would; only the agent's side runs in the bare
virtualenv. pip reaches the package registry (PIP_FIND_LINKS, if set, is kept)."""

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.sdk.conftest import run
from tests.sdk.test_sdk_doc import REPO, commands, doc_blocks, execute, verified

pytestmark = pytest.mark.django_db(transaction=True)

# Runs `-m MODULE ARGS...` or `FILE ARGS...` as python would, then says which django
# modules the process imported, if any (exit status 3), or that it imported none.
NO_DJANGO = '''\
import atexit, os, runpy, sys


def _check():
    loaded = sorted(m for m in sys.modules if m == "django" or m.startswith("django."))
    if loaded:
        sys.stderr.write(f"DJANGO IMPORTED: {loaded[:10]}\\n")
        sys.stderr.flush()
        os._exit(3)
    sys.stderr.write(f"no django among {len(sys.modules)} modules\\n")


atexit.register(_check)
if sys.argv[1] == "-m":
    sys.argv = sys.argv[2:]
    sys.path[0] = os.getcwd()  # as `python -m` puts the current folder first
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
'''


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """The python of a fresh virtualenv holding only `pip install sdk/` and what it
    depends on. The SDK is installed from a copy, so the build leaves nothing in sdk/."""
    root = tmp_path_factory.mktemp("bare-sdk")
    source = root / "sdk"
    shutil.copytree(REPO / "sdk", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = root / "venv"
    env = bare_env()
    execute([sys.executable, "-m", "venv", str(venv)], root, env=env, timeout=60)
    python = venv / "bin" / "python"
    execute([str(python), "-m", "pip", "install", "--quiet", str(source)], root, env=env,
            timeout=180)
    return python


def bare_env() -> dict:
    """This environment without what would put the repository or the server's settings
    within the bare virtualenv's reach."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(REPO)))
    return env


def test_the_bare_virtualenv_has_the_sdk_and_no_django(bare_python, tmp_path):
    found = subprocess.run(
        [str(bare_python), "-c", "import mission_weave.sdk.worker as w, mission_weave.protocol"
         " as p; print(w.__file__); print(p.__file__)"],
        cwd=tmp_path, env=bare_env(), capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    for path in found.stdout.split():
        assert Path(path).is_relative_to(bare_python.parent.parent), path  # not the repo's
        assert (Path(path).parent / "py.typed").is_file(), path  # PEP 561: typed packages

    django = subprocess.run([str(bare_python), "-c", "import django"], cwd=tmp_path,
                            env=bare_env(), capture_output=True, text=True, timeout=60)
    assert django.returncode != 0
    assert "No module named 'django'" in django.stderr


def test_the_doc_worker_runs_from_a_bare_install_without_importing_django(
        bare_python, live_group, tmp_path):
    from apps.identity import registry
    from apps.ledger.models import Group

    server, g = live_group.server, live_group.group_id
    agent = f"my-worker-{uuid.uuid4().hex[:6]}"  # agent ids are global to the database
    blocks = doc_blocks({"http://127.0.0.1:8000": server.url, "grp_demo": g,
                         "my-worker": agent,
                         '"agent:coordinator"': f'"{live_group.coordinator.key.principal}"'})
    folder = tmp_path / "reader"
    folder.mkdir()
    for file, text in blocks.values():
        if file:
            (folder / file).write_text(text)
    (folder / "no_django.py").write_text(NO_DJANGO)
    env = bare_env()

    def sdk(argv: list) -> subprocess.CompletedProcess:
        """A command line of the page (`python ...`) in the bare virtualenv, watched."""
        assert argv[0] == "python", argv
        done = execute([str(bare_python), "no_django.py", *argv[1:]], folder, env=env)
        assert "no django among" in done.stderr, done.stderr
        return done

    # Step 1: the key, made by the bare install; the operator registers it.
    [keys_command] = commands(blocks["keys"][1])
    printed = sdk(keys_command).stdout
    public_key = re.search(r"^public key: (\S+)$", printed, re.M)[1]
    saved = json.loads((folder / ".mw" / "agents" / f"{agent}.json").read_text())
    group = Group.objects.get(id=g)
    registry.create_user("owner", "owner")  # the demo's MissionOwner, named by offer_one.py
    registry.add_member(group, "user:owner", ["owner"])
    key = registry.register_agent(agent, public_key, json.loads(blocks["card"][1]))
    assert key.key_id == saved["keyId"]
    registry.add_member(group, f"agent:{agent}", ["worker", "coordinator"])

    # Steps 3 and 4: the item, then the worker, with the page's command lines.
    offered = sdk(["python", blocks["offer"][0]]).stdout
    item_id = re.search(r"^offered (\S+) of Mission (\S+) to ", offered, re.M)[1]
    [run_command] = commands(blocks["run"][1])
    worked = sdk(run_command)
    assert json.loads(worked.stdout.strip().splitlines()[-1]) == {
        "groupId": g, "workItemId": item_id, "outcome": "submitted"}

    item = run(verified(live_group, item_id, seconds=0), timeout=30)
    assert item["state"] in ("submitted", "verified")
    assert item["owner"] == agent
    [evidence] = item["submission"]["evidence"]
    assert evidence["producer"] == f"agent:{agent}"
    assert evidence["criteria"] == ["written"] and evidence["method"] == "self-check"
    assert evidence["artifacts"] == item["submission"]["artifacts"] != []
