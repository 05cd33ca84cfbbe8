"""The lead controller's periodic duties (Pinot's ControllerPeriodicTask): one daemon thread per duty that runs
a pass every ``interval`` seconds, or at once when poked (a watch fired, leadership gained). While this
controller should not act (not leading, session not connected) the pass is skipped and ``idle`` runs instead.
``stop`` waits at most ``stop_timeout`` seconds: a pass stuck on a dead store must not hang shutdown."""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from typing import Any


class PeriodicTask(abc.ABC):
    def __init__(self, name: str, interval: float, should_run: Callable[[], bool], stop_timeout: float):
        self.name = name
        self.interval = interval
        self.should_run = should_run
        self.stop_timeout = stop_timeout
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def run_pass(self) -> None:
        """One pass. It must not raise: the thread lives as long as the controller."""

    def idle(self) -> None:
        """Called instead of a pass while this controller should not act (release what a pass holds)."""
        return None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.stop_timeout)

    def poke(self) -> None:
        """Run a pass soon."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            if self.should_run():
                self.run_pass()
            else:
                self.idle()


def camel_keys(values: dict[str, Any]) -> dict[str, Any]:
    """A task's counters (snake_case fields) under the JSON names status endpoints answer with."""
    out = {}
    for key, value in values.items():
        head, *rest = key.split("_")
        out[head + "".join(part.title() for part in rest)] = value
    return out
