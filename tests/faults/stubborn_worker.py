"""A worker that never gives up its lease on its own: the worst case for fencing.

    python -m tests.faults.stubborn_worker --key KEY.json --url URL --group G --item I \
        --mission M --lease-seconds 3 --log OUT.jsonl

Built on the SDK's Client (signing, sessions, the same-envelope retry). It accepts the
offer of item I (waiting until there is one), starts it under a short lease, publishes
its deliverable, then renews and reports progress every 0.3 s. The SDK's own Worker
would cancel its handler once its lease expired; this one does not look. When it notices
that it was not running for a while (paused with SIGSTOP past its lease, say), it goes
on as if nothing happened: it sends lease.renew, work.progress and work.submit with the
lease it holds, records each answer, and exits. Every command it sends, with its id and
the answer (the events, or the error code), is one JSON line of OUT."""

import argparse
import asyncio
import json
import time
from pathlib import Path

from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk.client import ApiError, Client, utcnow
from mission_weave.sdk.keys import AgentKey

TICK = 0.3  # seconds between renewals
PAUSED = 2.0  # a tick this late means the process was not running


async def main(args) -> None:
    log = Path(args.log).open("a")  # noqa: SIM115 (open until the process is killed)
    client = Client(args.url, AgentKey.load(args.key), backoff_seconds=0.05)

    async def send(type_: str, body: dict, **fields) -> dict | None:
        member = await client.membership(args.group)
        envelope = client.envelope(args.group, type_, body, member["membershipEpoch"],
                                   workItemId=args.item, **fields)
        line = {"type": type_, "commandId": envelope["id"], "at": time.time()}
        try:
            answer = await client.send(args.group, envelope)
        except ApiError as error:
            line.update(status=error.status, code=error.code)
            answer = None
        else:
            line.update(status=200, events=[e["type"] for e in answer["events"]])
        log.write(json.dumps(line) + "\n")
        log.flush()
        return answer

    await client.open_session()
    while (accepted := await send("work.accept_offer", {"contractRevision": 1})) is None:
        await asyncio.sleep(0.2)  # not offered to us yet
    epoch = accepted["events"][0]["data"]["ownershipEpoch"]
    started = await send("work.start", {"leaseSeconds": args.lease_seconds},
                         ownershipEpoch=epoch)
    lease = {"ownershipEpoch": epoch, "leaseId": started["events"][0]["data"]["leaseId"]}
    # The deliverable, published while the lease is ours: the late submission that cites
    # it is complete, so fencing is the only reason left to refuse it.
    data = f"# {args.item}, by {client.agent_id}\n".encode()
    name = await client.put_blob(data)
    await send("artifact.publish", client.key.sign({
        "hash": name, "mediaType": "text/markdown", "schema": None, "size": len(data),
        "producer": client.agent_id, "agentCardVersion": "1", "missionId": args.mission,
        "groupId": args.group, "workItemId": args.item, "sources": [],
        "versions": {"tool": "stubborn_worker", "model": None, "capability": "1"},
        "createdAt": format_time(utcnow()), "classification": "internal",
        "uri": f"{args.url}/api/v1/blobs/{name}"}), **lease)
    while True:  # until one wait takes far longer than it should: we were paused
        began = time.monotonic()
        await asyncio.sleep(TICK)
        if time.monotonic() - began > PAUSED:
            break
        began = time.monotonic()
        await send("lease.renew", {"leaseSeconds": args.lease_seconds}, **lease)
        await send("work.progress", {"phase": "working"}, **lease)
        if time.monotonic() - began > PAUSED:
            break
    # Resumed: carry on with the lease we hold, as a worker that does not look would.
    await send("lease.renew", {"leaseSeconds": args.lease_seconds}, **lease)
    await send("work.progress", {"phase": "finishing"}, **lease)
    evidence = [{"id": f"ev-late-{epoch}", "subject": f"workItem:{args.item}",
                 "criteria": args.criteria.split(","), "method": "self-check",
                 "result": "pass", "producer": client.principal,
                 "timestamp": format_time(utcnow()), "artifacts": [name]}]
    await send("work.submit", {"contractRevision": 1, "artifacts": [name],
                               "evidence": evidence}, **lease)
    log.write(json.dumps({"done": True}) + "\n")
    log.close()
    await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--item", required=True)
    parser.add_argument("--mission", required=True)
    parser.add_argument("--criteria", default="ac1,ac2")
    parser.add_argument("--lease-seconds", type=int, default=3)
    parser.add_argument("--log", required=True)
    asyncio.run(main(parser.parse_args()))
