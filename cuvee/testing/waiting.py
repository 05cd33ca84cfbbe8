"""Waiting on a condition with a deadline: the one way tests (and test tooling) wait for something to happen."""

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
    """Poll ``predicate`` until it returns something truthy and return that; at the deadline fail with ``message``
    (or its result), so a failing test says what it was waiting for."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = message() if callable(message) else message
            raise AssertionError(f"condition not met within {timeout}s: {detail or predicate}")
        time.sleep(interval)
