"""Live pages: the operator pages refresh themselves without a reload.

A page says how in its ``<body>`` (``data-live``) and ``static/live.js`` does it: with
``"sse"`` it opens ``/live``, a stream of server-sent ``refresh`` events, and fetches the page
again on each; with ``"poll"`` it fetches the page every interval itself. Either way it stops
while the tab is hidden and catches up once when it shows again.

The stream sends a ``refresh`` when the table's notification channel says something was
scheduled, rescheduled, paused or resumed (PostgreSQL; at most one per ``MIN_GAP``), and
otherwise once per interval — completions and deletions notify nothing, so the counts they
change still show within an interval. One watch (one listening connection) serves every open
stream of an app; it starts with the first and stops with the last.

``"auto"`` picks ``"sse"`` where the client's database notifies and ``"poll"`` elsewhere: a
stream that would only tick holds a connection for nothing. Served through WSGI (Flask), a
stream would hold a worker thread per open tab, so mount it there with ``"poll"``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

from ekbatan.distributed_jobs.scheduler import ChangeWatch, SchedulerClient

__all__ = ["DEFAULT_INTERVAL", "LIVE_MODES", "LiveFeed", "resolve_mode"]

log = logging.getLogger("ekbatan.integrations.operator.live")

#: what ``operator_app(live=...)`` accepts
LIVE_MODES = ("auto", "sse", "poll", "off")
#: seconds between refreshes when nothing notifies (the ``poll`` interval too)
DEFAULT_INTERVAL = 5.0
#: how often a silent stream looks whether its page has gone
DISCONNECT_CHECK = 1.0
#: the least time between two refreshes of one stream: a burst of schedules is one refresh
MIN_GAP = 1.0


def resolve_mode(live: str, client: SchedulerClient) -> str:
    """The mode a page uses: ``auto`` becomes ``sse`` where the client's table notifies."""
    if live != "auto":
        return live
    return "sse" if client.notifies else "poll"


class LiveFeed:
    """The ``/live`` streams of one app and the one change watch they share."""

    def __init__(self, client: Callable[[], SchedulerClient], interval: float) -> None:
        self._client = client
        self.interval = interval
        self._lock = threading.Lock()
        self._subscribers: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._watch: ChangeWatch | None = None

    def _changed(self) -> None:
        # on the watch's thread: wake each stream on its own loop
        with self._lock:
            subscribers = list(self._subscribers)
        for loop, event in subscribers:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass  # that stream's loop has closed; it unsubscribes itself

    def _subscribe(self) -> tuple[asyncio.AbstractEventLoop, asyncio.Event]:
        # starting a watch only starts its thread (it connects there): fine on the loop
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._subscribers.add(entry)
            start = len(self._subscribers) == 1 and self._watch is None
        if start:
            watch = self._client().watch_changes(self._changed)
            with self._lock:
                if self._watch is None and self._subscribers:
                    self._watch, watch = watch, None
            if watch is not None:
                watch.stop()  # the last stream left while this one started
        return entry

    def _unsubscribe(self, entry: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> ChangeWatch | None:
        with self._lock:
            self._subscribers.discard(entry)
            if self._subscribers:
                return None
            watch, self._watch = self._watch, None
        return watch

    async def _next(
        self, event: asyncio.Event, deadline: float, disconnected: Callable[[], Awaitable[bool]]
    ) -> str | None:
        """Why the next refresh is due (``change`` or ``tick``), or None once the page has gone.
        The server may learn of a closed tab only by looking: look once a second."""
        loop = asyncio.get_running_loop()
        while True:
            left = deadline - loop.time()
            if left <= 0:
                return "tick"
            try:
                await asyncio.wait_for(event.wait(), timeout=min(left, DISCONNECT_CHECK))
                return "change"
            except TimeoutError:
                if await disconnected():
                    return None

    async def stream(self, disconnected: Callable[[], Awaitable[bool]]) -> AsyncIterator[str]:
        """The event stream of one open page; ends when ``disconnected()`` says so."""
        entry = self._subscribe()
        _, event = entry
        try:
            # the browser reconnects after this long if the stream breaks
            yield f"retry: {int(min(self.interval, DEFAULT_INTERVAL) * 1000)}\n\n"
            loop = asyncio.get_running_loop()
            while True:
                reason = await self._next(event, loop.time() + self.interval, disconnected)
                if reason is None:
                    return
                event.clear()
                yield f"event: refresh\ndata: {reason}\n\n"
                await asyncio.sleep(MIN_GAP)
        finally:
            watch = self._unsubscribe(entry)
            if watch is not None:
                # joining the listener's thread blocks: not on the event loop
                threading.Thread(target=watch.stop, name="ekbatan-operator-watch-stop", daemon=True).start()
