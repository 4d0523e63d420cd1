"""A real SMTP server for the notification tests: aiosmtpd on a free port of this machine,
in a thread of the test process, keeping each message it received as Python's email
module parses it. `hold("rcpt")` makes it stall a conversation after MAIL FROM, before
anything is delivered; `hold("data")` after the message is received and kept, before the
answer (a lost answer: the sender cannot know it was delivered); until `release()`. So a
test can kill the sender mid-send."""

import asyncio
import email
import email.policy
import threading
import time
from contextlib import contextmanager

from aiosmtpd.controller import Controller

from mission_weave.stack.services import free_port


class Inbox:
    def __init__(self) -> None:
        self.messages: list = []
        self.held = threading.Event()  # a conversation is stalled where `hold` said
        self._at: str | None = None
        self._released = threading.Event()

    def hold(self, at: str) -> None:
        self._at, self._released = at, threading.Event()

    def release(self) -> None:
        self._at = None
        self._released.set()

    async def _stall(self, at: str) -> None:
        if self._at == at:
            self.held.set()
            while not self._released.is_set():
                await asyncio.sleep(0.05)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        await self._stall("rcpt")
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(email.message_from_bytes(envelope.original_content,
                                                      policy=email.policy.default))
        await self._stall("data")
        return "250 Message accepted for delivery"

    def wait_for(self, count: int, seconds: float = 30) -> list:
        deadline = time.monotonic() + seconds
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.messages


@contextmanager
def smtp_server():
    """(inbox, port) of a running SMTP server, stopped after the block."""
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield inbox, port
    finally:
        inbox.release()
        controller.stop()
