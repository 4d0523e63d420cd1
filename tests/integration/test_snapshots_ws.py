"""CURSOR_TOO_OLD over the WebSocket (PROTOCOL §4): a SUBSCRIBE below the online floor
draws an ERROR frame carrying the snapshot reference; subscribing again from the
snapshot's sequence streams the online log from there. A real daphne process."""

import asyncio
from io import StringIO

import pytest
from django.core.management import call_command

from apps.ledger import snapshots
from apps.ledger.models import Snapshot
from mission_weave.protocol import canonical
from tests.integration.wslive import frame, frames, send, sequences, silence, ws
from tests.support import Scenario

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_subscription_below_the_floor_gets_the_snapshot_and_resumes_from_it(port):
    s = Scenario()
    s.running()
    group_id = s.world.group.id
    call_command("mw_snapshot", group_id, "--archive", stdout=StringIO())
    snapshot = Snapshot.objects.get(group_id=group_id)
    item_id = s.authorize()
    head = s.world.head

    async def scenario():
        async with ws(port, s.w1.token) as socket:
            await send(socket, {"op": "SUBSCRIBE", "groupId": group_id, "afterSequence": 0})
            error = await frame(socket)
            await send(socket, {"op": "SUBSCRIBE", "groupId": group_id,
                                "afterSequence": error["details"]["snapshot"]["sequence"]})
            resumed = await frames(socket, head - snapshot.sequence)
            await silence(socket)
            return error, resumed

    error, resumed = asyncio.run(scenario())
    assert (error["op"], error["code"], error["groupId"]) == ("ERROR", "CURSOR_TOO_OLD", group_id)
    reference = error["details"]["snapshot"]
    assert reference == snapshots.reference(snapshot)
    document = s.w1.client.get(reference["url"],
                               HTTP_AUTHORIZATION=f"Bearer {s.w1.token}").json()
    keys = s.w1.client.get("/api/v1/authority").json()["keys"]
    public_key = canonical.public_key_from_b64url(
        next(k["publicKey"] for k in keys if k["keyId"] == document["signature"]["keyId"]))
    assert canonical.verify(document, public_key)
    assert sequences(resumed) == list(range(snapshot.sequence + 1, head + 1))
    assert resumed[0]["event"]["prevHash"] == document["hash"]
    assert resumed[-1]["event"]["workItemId"] == item_id
