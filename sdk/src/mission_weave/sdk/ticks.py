"""The main loop of the runnable agents (worker.py, coordinator.py): act on news as it
arrives, and at the latest every few seconds."""

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from .client import ApiError

log = logging.getLogger("mission_weave.sdk.ticks")


async def tick_until_stopped(tick: Callable[[], Awaitable[None]], wake: asyncio.Event,
                             stop: asyncio.Event, seconds: float,
                             watched: list[asyncio.Task[Any]]) -> None:
    """Call `tick()` whenever `wake` is set, and at least every `seconds`, until `stop`
    is set. A failed request is logged and tried again on the next tick; if one of the
    `watched` background tasks failed, its exception ends the loop."""
    while not stop.is_set():
        wake.clear()
        try:
            await tick()
        except (httpx.TransportError, ApiError) as error:
            log.warning("tick failed: %r", error)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=seconds)
        for task in watched:
            failure = task.exception() if task.done() else None
            if failure:
                raise failure


def stop_on_signals() -> asyncio.Event:
    """An Event that SIGINT or SIGTERM sets (for the running loop's command-line agents)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop
