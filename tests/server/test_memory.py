"""A server's allocator settings (cuvee/server/memory.py): Arrow on the system allocator, which gives freed memory
back, and releasing freed memory is harmless to call at any time."""

from __future__ import annotations

import pyarrow as pa

from cuvee.server.memory import release_freed_memory, tune_allocators


def test_tuning_puts_arrow_on_the_system_allocator_and_releasing_keeps_live_arrays_whole() -> None:
    before = pa.default_memory_pool()
    try:
        tune_allocators()
        assert pa.default_memory_pool().backend_name == "system"
        array = pa.array([f"row-{i}" for i in range(100_000)])
        release_freed_memory()
        assert array[99_999].as_py() == "row-99999"
    finally:
        pa.set_memory_pool(before)


def test_the_releaser_runs_in_its_own_thread_and_a_burst_of_requests_makes_few_runs() -> None:
    import threading

    from cuvee.server.memory import MemoryReleaser
    from cuvee.testing.waiting import wait_until

    threads: list[str] = []
    releaser = MemoryReleaser(min_interval_seconds=0.2, release=lambda: threads.append(threading.current_thread().name))
    for _ in range(50):
        releaser.request()
    wait_until(lambda: releaser.runs >= 1, 5)
    wait_until(lambda: releaser.runs >= 2 or not releaser._wanted.is_set(), 5)
    assert releaser.runs <= 2 and set(threads) == {"memory-release"}
    releaser.request()  # a later request still runs
    wait_until(lambda: releaser.runs >= 2, 5)
