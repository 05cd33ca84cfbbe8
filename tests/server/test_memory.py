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
