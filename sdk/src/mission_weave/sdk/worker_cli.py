"""The Worker's command line, `python -m mission_weave.sdk.worker` (worker.py hands its
`__main__` to `main` here): the options, the handler named by `--handler module:function`,
and what `--once` prints and exits with.

With `--once` it processes one WorkItem to its end (submitted, blocked, checkpointed,
or failed) and exits: 0 when it was submitted, blocked or checkpointed, 1 with a
message (naming the server's error code) when the handler failed, the lease was lost or
the server refused one of the commands.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from . import admission, offline_buffer
from .client import ApiError, Client
from .handler_context import Handler
from .keys import AgentKey
from .runs import Outcome
from .ticks import stop_on_signals
from .worker import Worker


class HandlerError(ImportError):
    """The --handler spec names nothing importable, or not an async function."""


def load_handler(spec: str) -> Handler:
    """`module:function` (or `module.function`), e.g. `myworker:handle` for the file
    myworker.py in the current folder or on PYTHONPATH; raises HandlerError with a
    message that says what to do."""
    module_name, _, name = spec.partition(":")
    if not name:
        module_name, _, name = spec.rpartition(".")
    if not module_name or not name:
        raise HandlerError(f"handler {spec!r} is not module:function (e.g. myworker:handle)")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        top = module_name.split(".")[0]
        if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
            where = f"{top}.py" if top == module_name else f"the package {top}/"
            hint = f"run from the folder that holds {where}, or put it on PYTHONPATH"
        else:
            hint = f"{module_name} imports {error.name}: is it installed in this environment?"
        raise HandlerError(f"cannot import handler {spec!r}: {error} ({hint})") from error
    except Exception as error:  # the module itself raised while being imported
        raise HandlerError(f"cannot import handler {spec!r}: importing {module_name} raised "
                           f"{error!r}") from error
    handler = getattr(module, name, None)
    if handler is None:
        raise HandlerError(f"cannot import handler {spec!r}: {module_name} "
                           f"({getattr(module, '__file__', '?')}) has no {name!r}")
    if not (inspect.iscoroutinefunction(handler)
            or (callable(handler) and inspect.iscoroutinefunction(handler.__call__))):
        raise HandlerError(f"handler {spec!r} must be an async function: "
                           f"async def {name}(ctx) -> dict")
    loaded: Handler = handler  # an async function of one argument, as far as can be told
    return loaded


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mission_weave.sdk.worker",
                                     description="Run a MissionWeave Worker.")
    parser.add_argument("--key", required=True, help="the agent key file (.mw/agents/*.json)")
    parser.add_argument("--group", action="append", help="a Group to work for (repeatable; "
                        "default: the key file's groupId)")
    parser.add_argument("--handler", default="mission_weave.sdk.demo:handle",
                        help="module:function, an async function(ctx) -> result; the module "
                        "is looked up in the current folder too")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--cursors", help="the SQLite Cursor file (default: beside the key)")
    parser.add_argument("--transport", choices=("auto", "ws", "http"), default="auto")
    parser.add_argument("--once", action="store_true",
                        help="process one WorkItem to its end (submitted, blocked, checkpointed "
                        "or failed) and exit: 0 unless the handler failed or the server refused")
    parser.add_argument("--capability-range", action="append", default=[],
                        metavar="ID=RANGE", help="also accept contracts requiring these "
                        "versions of capability ID, e.g. summarize='>=1,<3' (repeatable; the "
                        "Agent Card keeps exact versions)")
    parser.add_argument("--queue-capacity", type=int, help="at most this many accepted "
                        "WorkItems waiting for a slot (default: maxConcurrency)")
    parser.add_argument("--offline-grace", type=float, metavar="SECONDS",
                        help="bounded offline execution (§11.5): buffer progress and "
                        "checkpoints while the server is unreachable until each lease's "
                        f"expiry plus SECONDS (the server's default is "
                        f"{offline_buffer.DEFAULT_GRACE_SECONDS}); off by default")
    args = parser.parse_args(argv)
    ranges: dict[str, str] = {}
    for given in args.capability_range:
        capability, _, spec = given.partition("=")
        try:
            admission.parse_spec(spec)
        except admission.VersionSpecError as error:
            parser.error(f"--capability-range {given!r}: {error}")
        if not capability:
            parser.error(f"--capability-range {given!r}: write ID=RANGE, e.g. summarize='>=1,<3'")
        ranges[capability] = spec
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # `--handler myworker:handle` beside myworker.py
    try:
        handler = load_handler(args.handler)
        key = AgentKey.load(args.key)
    except HandlerError as error:
        raise SystemExit(str(error)) from None
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"cannot read the key file {args.key}: {error!r} (make one with "
                         "python -m mission_weave.sdk.keys new AGENT_ID)") from None
    groups = args.group or ([key.group_id] if key.group_id else None)
    if not groups:
        raise SystemExit(f"no Group to work for: pass --group (the key file {args.key} "
                         "names none)")
    cursors = args.cursors or str(Path(args.key).with_suffix("")) + ".cursors.sqlite3"
    try:
        outcome = asyncio.run(_serve(args.url, key, groups, handler, cursors, args.transport,
                                     args.once, capability_ranges=ranges,
                                     queue_capacity=args.queue_capacity,
                                     offline_grace_seconds=args.offline_grace))
    except ApiError as error:
        raise SystemExit(f"the server at {args.url} refused: "
                         f"{error}{_hint(error, key, groups)}") from None
    except httpx.TransportError as error:
        raise SystemExit(f"cannot reach the server at {args.url}: {error!r} (is it running? "
                         "`make run` serves the demo on http://127.0.0.1:8000)") from None
    if args.once:
        if outcome is None:
            raise SystemExit("--once: stopped before a WorkItem was processed")
        print(json.dumps({"groupId": outcome.group_id, "workItemId": outcome.work_item_id,
                          "outcome": outcome.state}))
        if not outcome.ok:
            raise SystemExit(f"--once: {outcome.message}")


def _hint(error: ApiError, key: AgentKey, groups: list[str]) -> str:
    if error.code in ("UNAUTHENTICATED", "INVALID_SIGNATURE"):
        return (f" (is agent {key.agent_id} registered with this key? `python manage.py "
                f"mw_register_agent {key.agent_id} --public-key=...` prints its keyId, which "
                f"must be the key file's, now {key.key_id})")
    if error.code == "NOT_A_MEMBER":
        return (f" (admit it: `python manage.py mw_add_member {groups[0]} "
                f"agent:{key.agent_id} --roles worker`)")
    return ""


async def _serve(url: str, key: AgentKey, groups: list[str], handler: Handler, cursors: str,
                 transport: str, once: bool = False, **options: Any) -> Outcome | None:
    stop = stop_on_signals()
    async with Client(url, key) as client:
        worker = Worker(client, groups, handler, cursors, transport=transport, once=once,
                        **options)
        await worker.run(stop)
        return worker.outcome
