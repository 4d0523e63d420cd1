"""The MissionWeave Agent SDK: pure Python (httpx, websockets), no Django.

- `client`: keys, sessions, signed commands with idempotent retry, reads, blobs;
- `inbox`: per-Group, in-order, deduplicated delivery with a durable Cursor;
- `queues`: per-Group work state rebuilt by replaying events;
- `worker`: a runnable Worker (`python -m mission_weave.sdk.worker`);
- `coordinator`: a tiny demo coordinator loop (`python -m mission_weave.sdk.coordinator`).
"""
