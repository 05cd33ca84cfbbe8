"""Small helpers shared by the metastore tests and their child processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 5.0,
    *,
    interval: float = 0.01,
    message: str | Callable[[], str] = "",
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail with ``message`` (or its result) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = message() if callable(message) else message
            raise AssertionError(f"condition not met within {timeout}s: {detail or predicate}")
        time.sleep(interval)
