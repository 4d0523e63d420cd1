"""Live dashboard pages: `/ws/dashboard/g/<group_id>/` tells a member's open page that
something in the Group changed, never what. The page re-fetches its live regions over
HTTP (static/dashboard/live.js), so every permission check stays in the views.

Each frame is one HTML fragment the htmx WebSocket extension could swap out of band:

    <div id="mw-live-signal" hx-swap-oob="true" data-sequence="42"
         data-missions="msn_1 msn_2" data-items="wi_1"></div>

the newest sequence, and the Missions and WorkItems that the events since the previous
frame touched. `data-catch-up` in place of the ids means "anything may have changed":
sent on connect (a page may have missed commits while it loaded), after the process's
Redis subscription was lost, and for a burst too large to name. A burst is coalesced
into at most one frame per SIGNAL_INTERVAL on each connection.

Only a logged-in live member of the Group gets a connection (otherwise the handshake is
refused: HTTP 403); one who stops being a member is closed with 4403, which the htmx
extension does not reconnect after.
"""

import asyncio
import logging
import time

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils.html import format_html

from apps.delivery.consumer import in_thread
from apps.delivery.cursors import is_group_id
from apps.delivery.hub import HUB
from apps.ledger import feed

from . import access

log = logging.getLogger(__name__)

NO_LONGER_A_MEMBER = 4403
SIGNAL_INTERVAL = 0.1  # seconds, at least, between two frames on one connection
MAX_NAMED = 200  # ids one frame names; a burst touching more is sent as a catch-up


class DashboardLiveConsumer(AsyncWebsocketConsumer):
    # No channel layer: pushes come from this process's hub (apps/delivery/hub.py), so a
    # Redis restart must not close the socket (Channels ends a consumer whose layer fails).
    channel_layer_alias = None
    async def connect(self):
        self.group_id = self.scope["url_route"]["kwargs"]["group_id"]
        viewer = await self._viewer()
        if viewer is None:
            await self.close()  # before accept: HTTP 403
            return
        self.principal_id = viewer.principal.id  # the hub's membership notices name it
        self.checked_at = time.monotonic()
        self.sent = 0  # the sequence of the last frame sent
        self.sequence = 0  # the newest sequence pushed or read
        self.missions, self.items = set(), set()
        self.everything = False  # the next frame is a catch-up
        self.head_wanted = False  # read the head before the next frame
        self.recheck_wanted = False
        self.wake = asyncio.Event()
        await self.accept()
        await HUB.add(self.group_id, self)  # subscribed before the head is read below
        self.catch_up(self.group_id)
        self.signaller = asyncio.get_running_loop().create_task(self._signal())

    async def disconnect(self, code):
        signaller = getattr(self, "signaller", None)
        if signaller is not None:
            HUB.remove(self.group_id, self)
            signaller.cancel()

    async def _viewer(self) -> access.Viewer | None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not is_group_id(self.group_id):
            return None
        try:
            return await in_thread(access.viewer)(user, self.group_id)
        except access.NotFound:
            return None

    # -- the hub calls these on this loop; they must not block ------------------------

    def push(self, group_id: str, documents: list, frames: list) -> None:
        for document in documents:
            if document["sequence"] <= self.sent:
                continue  # a repeated push: already signalled
            self.sequence = max(self.sequence, document["sequence"])
            if document["missionId"]:
                self.missions.add(document["missionId"])
            if document["workItemId"]:
                self.items.add(document["workItemId"])
        if len(self.missions) + len(self.items) > MAX_NAMED:
            self.everything = True
            self.missions.clear()
            self.items.clear()
        self.wake.set()

    def recheck(self, group_id: str) -> None:
        self.recheck_wanted = True
        self.wake.set()

    def catch_up(self, group_id: str) -> None:
        self.everything = self.head_wanted = True
        self.wake.set()

    # -- one task per connection sends the frames -------------------------------------

    async def _signal(self) -> None:
        try:
            while True:
                await self.wake.wait()
                self.wake.clear()
                if self.recheck_wanted or time.monotonic() - self.checked_at > \
                        settings.MW_WS_MEMBERSHIP_TTL_SECONDS:
                    self.recheck_wanted = False  # a notice during the check checks again
                    if await self._viewer() is None:
                        HUB.remove(self.group_id, self)
                        await self.close(code=NO_LONGER_A_MEMBER)
                        return
                    self.checked_at = time.monotonic()
                if self.head_wanted:
                    self.head_wanted = False
                    head = await in_thread(feed.head)(self.group_id)
                    self.sequence = max(self.sequence, head)
                frame = self._take_frame()
                if frame is not None:
                    await self.send(text_data=frame)
                    await asyncio.sleep(SIGNAL_INTERVAL)  # pushes meanwhile join the next
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("live dashboard signals failed; the page reconnects")
            await self.close(code=1011)  # one the htmx extension reconnects after

    def _take_frame(self) -> str | None:
        if self.everything:
            frame = format_html('<div id="mw-live-signal" hx-swap-oob="true" '
                                'data-sequence="{}" data-catch-up></div>', self.sequence)
        elif self.sequence > self.sent:
            frame = format_html('<div id="mw-live-signal" hx-swap-oob="true" '
                                'data-sequence="{}" data-missions="{}" data-items="{}"></div>',
                                self.sequence, _ids(self.missions), _ids(self.items))
        else:
            return None
        self.sent = self.sequence
        self.everything = False
        self.missions.clear()
        self.items.clear()
        return frame


def _ids(ids: set) -> str:
    # Protocol ids have no spaces (core/schemas.py ID), so a space separates them.
    return " ".join(sorted(ids))
