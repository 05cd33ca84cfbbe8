"""Giving memory back to the operating system when a consuming segment goes.

A consuming segment's rows live in numpy buffers (malloc) and Arrow arrays. When the segment is replaced by its
committed copy they are freed, but allocators keep freed pages for reuse: without care a server's resident memory
grows by every segment it consumed and the consuming-memory budget bounds nothing the operating system can see.
Measured on a server ingesting ~90 MB of strings under a 16 MiB budget (tests/e2e/test_memory_budget_rss.py):
its heap grew by ~190 MiB with the defaults, ~135 MiB with a fixed mmap threshold alone, ~75 MiB with it and
Arrow on the system allocator. So a server (``tune_allocators``, once at start) fixes glibc's mmap threshold —
otherwise it climbs to 32 MiB after the first large free, and every buffer below it then comes from a heap that
fragments — and puts Arrow on the system allocator (mimalloc keeps freed segments), and each released consuming
segment trims the heap (``release_freed_memory``): one call, cheap next to building the segment.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
import threading
import time
from collections.abc import Callable

import pyarrow as pa

log = logging.getLogger(__name__)


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (malloc_trim and mallopt are glibc's; musl and macOS have neither)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


_GLIBC = _glibc()
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 1 << 20


def tune_allocators() -> None:
    """Make freed memory go back to the operating system (see the module docstring); process-wide, idempotent."""
    try:
        pa.set_memory_pool(pa.system_memory_pool())
        if _GLIBC is not None:
            _GLIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    except Exception:  # noqa: BLE001 - a platform without these keeps its defaults
        log.debug("tuning the allocators failed", exc_info=True)


def release_freed_memory() -> None:
    """Return freed pages of Arrow's pool and of the C heap to the operating system, now, in this thread.
    Arrow's system pool trims the C heap itself; the explicit trim covers a pool that is not the system one."""
    try:
        pool = pa.default_memory_pool()
        pool.release_unused()
        if _GLIBC is not None and pool.backend_name != "system":
            _GLIBC.malloc_trim(0)
    except Exception:  # noqa: BLE001 - never worth failing a segment release over
        log.debug("giving freed memory back failed", exc_info=True)


class MemoryReleaser:
    """Runs ``release_freed_memory`` in a thread of its own, at most once per ``min_interval_seconds``: a trim
    locks the heap's arenas and takes ~0.1–0.4 s on a large heap, so it must not run in the query thread that
    happened to release a segment last, and a burst of releases needs one trim, not one each."""

    def __init__(self, min_interval_seconds: float = 1.0, release: Callable[[], None] = release_freed_memory):
        self.min_interval_seconds = min_interval_seconds
        self.runs = 0
        self._release = release
        self._wanted = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def request(self) -> None:
        """Ask for a release soon; returns at once."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memory-release", daemon=True)
                self._thread.start()
        self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            self._release()
            self.runs += 1
            time.sleep(self.min_interval_seconds)  # rate limit: requests meanwhile make one more run after it


RELEASER = MemoryReleaser()
