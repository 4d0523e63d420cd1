"""The worker's command line without a server: the handler spec is imported from the
current folder, and what cannot be imported says what to do."""

import subprocess
import sys
import uuid

import pytest

from mission_weave.sdk.worker_cli import HandlerError, load_handler

WORKER = [sys.executable, "-m", "mission_weave.sdk.worker"]


def worker(cwd, *argv) -> subprocess.CompletedProcess:
    return subprocess.run([*WORKER, *argv], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_a_handler_module_that_is_not_there_is_named_with_what_to_do(tmp_path):
    done = worker(tmp_path, "--key", "my-worker.json", "--handler", "myworker:handle")

    assert done.returncode == 1
    assert done.stderr == ("cannot import handler 'myworker:handle': No module named "
                           "'myworker' (run from the folder that holds myworker.py, or put it "
                           "on PYTHONPATH)\n")


def test_the_handler_module_is_found_in_the_current_folder(tmp_path):
    (tmp_path / "myworker.py").write_text("async def handle(ctx):\n    return None\n")

    done = worker(tmp_path, "--key", "missing.json", "--handler", "myworker:handle", "--once")

    assert done.returncode == 1  # it got as far as the key file
    assert done.stderr.startswith("cannot read the key file missing.json: ")
    assert "python -m mission_weave.sdk.keys new" in done.stderr


def module(tmp_path, monkeypatch, source: str) -> str:
    name = f"handler_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.mark.parametrize("source, spec, message", [
    ("import no_such_dependency_here\n", "{m}:handle",
     "{m} imports no_such_dependency_here: is it installed in this environment?"),
    ("raise RuntimeError('boom')\n", "{m}:handle", "importing {m} raised RuntimeError('boom')"),
    ("async def other(ctx):\n    pass\n", "{m}:handle", "has no 'handle'"),
    ("def handle(ctx):\n    pass\n", "{m}:handle",
     "must be an async function: async def handle(ctx) -> dict"),
    ("", "{m}", "is not module:function"),
])
def test_what_cannot_be_used_as_a_handler_is_refused_clearly(tmp_path, monkeypatch, source,
                                                             spec, message):
    name = module(tmp_path, monkeypatch, source)
    with pytest.raises(HandlerError) as refused:
        load_handler(spec.format(m=name))
    assert message.format(m=name) in str(refused.value)


def test_an_async_handler_loads_with_a_colon_or_a_dot(tmp_path, monkeypatch):
    name = module(tmp_path, monkeypatch, "async def handle(ctx):\n    return {}\n")
    assert load_handler(f"{name}:handle").__name__ == "handle"
    assert load_handler(f"{name}.handle").__name__ == "handle"
