"""The scripted provider on its own event loop thread, for synchronous tests (interop,
subprocess servers, the benchmark)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .fake_llm import FakeLLM, Reply


@contextmanager
def fake_llm_in_thread(
    responder: Callable[[dict[str, Any]], Reply] | None = None, *, record: bool = True
) -> Iterator[FakeLLM]:
    loop = asyncio.new_event_loop()
    fake = FakeLLM(responder)
    fake.record = record
    thread = threading.Thread(target=loop.run_forever, name="fake-llm", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(fake.start(), loop).result(timeout=10)
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(fake.aclose(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
