"""An event loop owned by the scheduler, on its own thread, for ``async def`` task bodies.

A worker thread hands the coroutine over and waits for it, so ``threads`` still bounds how
many executions run at once, whichever kind they are.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any


class AsyncRunner:
    def __init__(self, name: str = "ekbatan-asyncio") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running: set[concurrent.futures.Future[Any]] = set()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name=self._name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` on the loop and block the calling thread until it finishes."""
        return self.submit(coroutine).result()

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Start ``coroutine`` on the loop; ``cancel_all`` reaches it until it finishes."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._ensure_loop())
        with self._lock:
            self._running.add(future)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._running.discard(future)

    def cancel_all(self) -> int:
        """Cancel every running coroutine (the shutdown's "interrupt" phase)."""
        with self._lock:
            running = list(self._running)
        for future in running:
            future.cancel()
        return len(running)

    def stop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout=5)
            if not loop.is_running():
                loop.close()
