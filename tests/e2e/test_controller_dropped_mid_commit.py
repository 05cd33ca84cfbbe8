"""The lead controller process dies at a named point between commit steps (``CUVEE_FAULTS=point=kill``, a real
SIGKILL of the process), as separate processes: a standby takes over and the half-done commit is completed by the
replicas' retries (or repair), exactly once: no row lost or doubled, and commits go on."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from cuvee.controller import faults
from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.testing.waiting import wait_until
from tests.e2e.support import (
    FAST,
    counts,
    create_id_table,
    fast_sqlite,
    log_stream,
    produce_ids,
    start_standby_controller,
)

TABLE = "dropped"


def _dead(pid: int) -> bool:
    """Exited (a zombie counts: ``cuvee cluster up`` launched it, nobody has reaped it yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("point", "pauseless"), [
    (faults.COMMIT_AFTER_STEP1, False),  # metadata DONE; no next segment, ideal state not flipped
    (faults.COMMIT_AFTER_STEP2, False),  # DONE and the next segment's metadata; ideal state not flipped
    (faults.COMMIT_START_AFTER_PIN, True),  # pauseless: COMMITTING at its end offset; nothing placed yet
], ids=["after-step1", "after-step2", "pauseless-after-pin"])
def test_a_controller_killed_between_commit_steps(point: str, pauseless: bool, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faults.ENVIRONMENT, f"{point}=kill")  # only the first controller is launched with it
    info = up(LocalClusterSpec(dir=tmp_path, servers=2, metadata=fast_sqlite(tmp_path), overrides=FAST))
    monkeypatch.delenv(faults.ENVIRONMENT)
    http = httpx.Client(timeout=30)
    configs = log_stream(tmp_path, TABLE, flush_rows=4000)  # 2 partitions x 2 replicas on 2 servers: 2,000/segment
    standby, standby_url = start_standby_controller(tmp_path)
    try:
        create_id_table(http, info["controller"], TABLE, configs, pauseless=pauseless)
        produce_ids(configs, 0, 6_000)  # ~3,000 per partition: each partition's first segment commits
        wait_until(lambda: _dead(info["pids"]["controller"]), 60, interval=0.1,
                   message=f"the leader never reached {point}")
        log = Path(info["logs"]["controller"]).read_text()
        assert "SIGKILLing this process" in log and point in log

        produce_ids(configs, 6_000, 14_000)
        wait_until(lambda: http.get(f"{standby_url}/health").json()["leader"], 30, interval=0.1,
                   message="the standby never took over")
        wait_until(lambda: counts(http, info["broker"], TABLE) == (14_000, 14_000), 120, interval=0.2,
                   message=lambda: f"count after the takeover: {counts(http, info['broker'], TABLE)}")

        def segments() -> dict[str, dict[str, str]]:
            ideal = http.get(f"{standby_url}/tables/{TABLE}/idealstate").json()
            return ideal.get("REALTIME", ideal)

        def committed() -> list[str]:
            return sorted(s for s, r in segments().items() if r and set(r.values()) == {"ONLINE"})

        # 14,000 rows over 2 partitions at 2,000 rows per segment: at least 3 commits each, the dropped one included
        wait_until(lambda: len(committed()) >= 6, 120, interval=0.2, message=lambda: f"committed: {committed()}")
        for segment in committed():
            meta = http.get(f"{standby_url}/segments/{TABLE}/{segment}/metadata").json()
            assert meta["status"] == "DONE" and meta["totalDocs"] == 2_000, meta

        def consuming_per_partition() -> dict[str, int]:
            found: dict[str, int] = {}
            for segment, replicas in segments().items():
                if "CONSUMING" in replicas.values():
                    found[segment.split("__")[1]] = found.get(segment.split("__")[1], 0) + 1
            return found

        # exactly one successor per partition once no commit is in flight (never a second one, never none)
        wait_until(lambda: consuming_per_partition() == {"0": 1, "1": 1}, 30, interval=0.2,
                   message=lambda: f"consuming segments: {segments()}")
        assert counts(http, info["broker"], TABLE) == (14_000, 14_000)
    finally:
        http.close()
        standby.terminate()
        standby.wait(30)
        down(tmp_path)
