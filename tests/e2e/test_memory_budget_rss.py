"""A server process with a consuming-memory budget, measured from outside: while ~150 MB of distinct strings
stream through one partition (one segment would hold them all: its row threshold is far above the rows), the
server's anonymous resident memory — the heap, where consuming segments live; committed segments are
memory-mapped files and count elsewhere — grows by a bound set by the budget, not by the stream: the consuming
segments' share, the segment being built and the one being replaced while the next fills (about two more
budgets), plus a fixed allowance (decode batches, a query's scan). Measured: 78–98 MiB at a 16 MiB budget, ~130
at 32 MiB; without a budget ~300 MiB (``CUVEE_TEST_RSS_BUDGET=0`` shows it), and ~190 at 16 MiB before the
server gave freed memory back (cuvee/server/memory.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.stream import open_admin, open_producer
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST, fast_sqlite, log_stream

TABLE = "rss"
BUDGET = 16 * 1024 * 1024
ALLOWANCE = 64 * 1024 * 1024
ROWS = 250_000
WIDTH = 600


def anonymous_rss(pid: int) -> int:
    """RssAnon of ``pid`` in bytes (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no RssAnon for {pid}")


class PeakSampler:
    """Samples a process's anonymous RSS every 20 ms in a thread; ``peak`` is the largest seen."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, anonymous_rss(pid), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            now = anonymous_rss(self.pid)
            if os.environ.get("CUVEE_TEST_RSS_TRACE") and now > self.peak + 4 * 2**20:
                print(f"{time.monotonic():.2f} {now / 2**20:.0f} MiB", flush=True)
            self.peak = max(self.peak, now)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_the_servers_heap_stays_within_its_consuming_memory_budget(tmp_path: Path) -> None:
    budget = int(os.environ.get("CUVEE_TEST_RSS_BUDGET", BUDGET))  # 0 shows the growth the budget prevents
    # no DuckDB copies: they have a budget of their own (native_copy_bytes), and a server holding 100k+ rows of a
    # table copies its committed segments as they arrive, into DuckDB's buffer pool — not consuming memory
    overrides = {**FAST, "server": {**FAST["server"], "consuming_memory_bytes": budget, "native_copy_bytes": 0}}
    info = up(LocalClusterSpec(dir=tmp_path, servers=1, metadata=fast_sqlite(tmp_path), overrides=overrides))
    http = httpx.Client(timeout=30)
    configs = log_stream(tmp_path, TABLE, flush_rows=10_000_000)
    try:
        with open_admin(configs) as admin:
            admin.create_topic(TABLE, 1)
        schema = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"},
                                                               {"name": "text", "dataType": "STRING"}]}
        assert http.post(f"{info['controller']}/schemas", json=schema).status_code < 300
        assert http.post(f"{info['controller']}/tables", json={
            "tableName": TABLE, "tableType": "REALTIME", "segmentsConfig": {"replicasPerPartition": "1"},
            "tableIndexConfig": {"streamConfigs": configs, "noDictionaryColumns": ["text"]}}).status_code < 300
        [server_pid] = [pid for name, pid in info["pids"].items() if name.startswith("server")]
        count = lambda: http.post(f"{info['broker']}/query/sql",  # noqa: E731
                                  json={"sql": f"SELECT COUNT(*) FROM {TABLE}"}).json()
        wait_until(lambda: count().get("resultTable", {}).get("rows") == [[0]], 60, interval=0.2)
        sampler = PeakSampler(server_pid)
        baseline = sampler.peak
        filler = "x" * WIDTH
        with open_producer(configs) as producer:
            producer.produce_many((str(i).encode(), orjson.dumps({"id": i, "text": f"{i:012d}{filler}"}))
                                  for i in range(ROWS))
            producer.flush()
        wait_until(lambda: count().get("resultTable", {}).get("rows") == [[ROWS]], 180, interval=0.5)
        growth = sampler.stop() - baseline
        records = http.get(f"{info['controller']}/segments/{TABLE}/metadata").json().values()
        done = [r for r in records if r["status"] == "DONE"]
        print(f"budget {budget} B: {len(done)} segments committed, heap grew by {growth / 2**20:.1f} MiB")
        assert growth <= 3 * budget + ALLOWANCE, f"heap grew by {growth / 2**20:.1f} MiB"
        assert len(done) >= 6  # ~150 MB of rows in segments of at most ~16 MiB of memory each
    finally:
        http.close()
        down(tmp_path)
