"""The deep store unwritable during a live run, as separate processes (DESIGN.md §9): ingestion and commits go on
with empty download URIs, replicas that need a copy fetch it from a peer, queries stay exact, and once the deep
store is back the controller's repair uploads the peer-only segments and sets their URIs."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST, counts, create_id_table, log_stream, produce_ids

TABLE = "bypass"
FAST_WITH_REPAIR = {**FAST, "controller": {**FAST["controller"], "repair_interval_seconds": 0.5}}


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_commits_go_on_without_the_deep_store_and_repair_uploads_later(tmp_path: Path) -> None:
    info = up(LocalClusterSpec(dir=tmp_path, servers=2, overrides=FAST_WITH_REPAIR))
    http = httpx.Client(timeout=30)
    configs = log_stream(tmp_path, TABLE, flush_rows=4000)
    # A file where the table's deep-store directory should be: every upload under it fails.
    blocker = tmp_path / "deepstore" / f"{TABLE}_REALTIME"
    blocker.write_text("not a directory")

    def count() -> tuple[int, int]:
        return counts(http, info["broker"], TABLE)

    def committed() -> list[dict]:
        segments = http.get(f"{info['controller']}/segments/{TABLE}").json()[0]["REALTIME"]
        metas = [http.get(f"{info['controller']}/segments/{TABLE}/{s}/metadata").json() for s in segments]
        return [m for m in metas if m["status"] == "DONE"]

    try:
        create_id_table(http, info["controller"], TABLE, configs)
        produce_ids(configs, 0, 10_000)
        wait_until(lambda: count() == (10_000, 10_000), 120, interval=0.2, message=lambda: f"count {count()}")
        done = wait_until(lambda: (c := committed()) and len(c) >= 4 and c, 120, interval=0.2,
                          message="segments did not commit while the deep store was down")
        assert all(m["downloadUri"] in ("", None) for m in done), "an upload succeeded into a broken deep store"

        blocker.unlink()  # the deep store is back
        wait_until(lambda: all(m["downloadUri"] for m in committed()), 120, interval=0.2,
                   message="repair did not upload the peer-only segments")
        for meta in committed():
            key = meta["downloadUri"].removeprefix((tmp_path / "deepstore").resolve().as_uri() + "/")
            assert (tmp_path / "deepstore" / key).is_file(), meta
        assert count() == (10_000, 10_000)
    finally:
        http.close()
        down(tmp_path)
