"""A multi-process cluster on an S3 deep store (moto's server on loopback, reached through the standard AWS
variables, as ``cuvee cluster up --deep-store s3://...`` would be): segments commit into S3, and when S3 goes
away mid-run commits go on with peers holding the only copies, queries stay exact, and once S3 is back the
controller's repair uploads the peer-only segments."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from cuvee.deepstore import open_deepstore
from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.testing.moto_s3 import MotoS3
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST, counts, create_id_table, log_stream, produce_ids

TABLE = "ons3"
FAST_WITH_REPAIR = {**FAST, "controller": {**FAST["controller"], "repair_interval_seconds": 0.5}}


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_cluster_on_s3_commits_into_it_and_goes_on_through_an_s3_outage(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with MotoS3(bucket="cluster") as s3:
        for key, value in {**s3.environment(), "AWS_MAX_ATTEMPTS": "2"}.items():
            monkeypatch.setenv(key, value)  # the roles inherit them: no S3 settings in their configs
        uri = "s3://cluster/deep store"
        store = open_deepstore(uri, s3.settings)
        info = up(LocalClusterSpec(dir=tmp_path, servers=2, deep_store=uri, overrides=FAST_WITH_REPAIR))
        http = httpx.Client(timeout=30)
        configs = log_stream(tmp_path, TABLE, flush_rows=1000)

        def committed() -> list[dict]:
            segments = http.get(f"{info['controller']}/segments/{TABLE}").json()[0]["REALTIME"]
            metas = [http.get(f"{info['controller']}/segments/{TABLE}/{s}/metadata").json() for s in segments]
            return [m for m in metas if m["status"] == "DONE"]

        try:
            assert info["deepStore"] == uri
            create_id_table(http, info["controller"], TABLE, configs)
            produce_ids(configs, 0, 4_000)
            wait_until(lambda: counts(http, info["broker"], TABLE) == (4_000, 4_000), 120, interval=0.2)
            before = wait_until(lambda: (c := committed()) and len(c) >= 2 and c, 120, interval=0.2)
            for meta in before:
                assert meta["downloadUri"].startswith("s3://cluster/deep store/"), meta
                assert store.exists(store.key_of(meta["downloadUri"]))
            assert not any(k.startswith(".cuvee-tmp") for k in store.list())
            assert store.list("ons3_REALTIME/uploads/") == []  # every commit moved its upload into place
            assert http.get(f"{info['controller']}/health").json()["receivedSegmentBytes"] == 0  # none through it

            s3.stop()  # S3 is gone
            produce_ids(configs, 4_000, 8_000)
            wait_until(lambda: counts(http, info["broker"], TABLE) == (8_000, 8_000), 120, interval=0.2)
            names = {m["segmentName"] for m in before}
            peer_only = wait_until(lambda: [m for m in committed() if m["segmentName"] not in names] or None, 120,
                                   interval=0.2, message="nothing committed while S3 was down")
            assert any(m["downloadUri"] in ("", None) for m in peer_only), peer_only

            s3.start()  # back, with every object still there
            wait_until(lambda: all(m["downloadUri"] for m in committed()), 120, interval=0.2,
                       message="repair did not upload the peer-only segments")
            for meta in committed():
                assert store.exists(store.key_of(meta["downloadUri"])), meta
            assert counts(http, info["broker"], TABLE) == (8_000, 8_000)
            assert http.get(f"{info['controller']}/health").json()["receivedSegmentBytes"] > 0  # repair fetched
            metrics = http.get(f"{info['controller']}/metrics").text
            assert 'cuvee_controller_received_segment_bytes_total{source="repair_upload"}' in metrics
        finally:
            http.close()
            down(tmp_path)
