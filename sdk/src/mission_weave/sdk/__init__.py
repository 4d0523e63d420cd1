"""The MissionWeave Agent SDK: pure Python (httpx, websockets), no Django. A newcomer's
page, with a worker that runs as written: docs/sdk.md.

- `keys`: key files (`python -m mission_weave.sdk.keys new AGENT_ID` makes one);
- `client`: sessions, signed commands with idempotent retry, reads, blobs;
- `inbox`: per-Group, in-order, deduplicated delivery with a durable Cursor (one that
  belongs to another log, after a server reset, starts over from sequence 0);
- `queues`: per-Group work state rebuilt by replaying events;
- `admission`: the Worker's admission control (§10.3), a pure decision per offer;
- `worker`: a runnable Worker (`python -m mission_weave.sdk.worker`, `--once`), composed of
  `session`, `slots`, `offers`, `runs`, `leases`, `handler_context` (what a handler gets)
  and `offline_execution`; its command line is `worker_cli`;
- `coordinator`: a tiny demo coordinator loop (`python -m mission_weave.sdk.coordinator`);
- `offline_buffer`: bounded offline execution (§11.5): the durable buffer of reports made while
  the Group service is unreachable, rebased and reconciled on reconnection; `OfflineError`.
"""

from typing import Any

__all__ = ["OfflineError"]


def __getattr__(name: str) -> Any:
    # Imported when asked for, not with the package: `python -m mission_weave.sdk.keys`
    # (or .worker) would otherwise run a module the package had already imported, and
    # Python warns about that.
    if name == "OfflineError":
        from .offline_buffer import OfflineError
        return OfflineError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
