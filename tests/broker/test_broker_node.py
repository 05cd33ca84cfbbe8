"""``cuvee broker --config F``: config loading, the foreground process, registration, and start/stop."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from cuvee.broker.broker import Broker
from cuvee.broker.config import BROKER_TAG, BrokerConfig, load_broker_config
from cuvee.cluster.store import ClusterStore
from cuvee.config.errors import ConfigValidationError
from cuvee.errors import UserError
from cuvee.metastore import open_metastore
from cuvee.testing.process import die_with_parent
from tests.broker.helpers import CLUSTER, FAST_META, wait_until


def test_config_file_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(f'metadata = "sqlite://{tmp_path}/meta.db"\ntimeout_ms = 2500\nrouting_poll_seconds = 0.5\n')
    config = load_broker_config(path, {"port": 1234})
    assert config.timeout_ms == 2500 and config.routing_poll_seconds == 0.5 and config.port == 1234
    assert config.tags == (BROKER_TAG,)


def test_config_mistakes_are_reported_by_key_path(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('timeout_ms = "soon"\nnope = 1\n')
    with pytest.raises(ConfigValidationError) as err:
        load_broker_config(path)
    assert "$.timeout_ms" in str(err.value) and "$.nope" in str(err.value)
    with pytest.raises(ConfigValidationError, match="routing_poll_seconds must be positive"):
        load_broker_config(None, {"routing_poll_seconds": 0})
    with pytest.raises(UserError, match="metadata"):
        Broker(BrokerConfig())


def test_register_adds_the_broker_command() -> None:
    from cuvee.cli import role_cmd

    parser = argparse.ArgumentParser()
    role_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["broker", "--config", "b.toml", "--port", "0"])
    assert args.config == "b.toml" and args.port == 0 and args.func is role_cmd.run and args.role.name == "broker"


def test_broker_registers_itself_and_unregisters_its_live_node(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}"
    broker = Broker(BrokerConfig(cluster=CLUSTER, metadata=uri)).start()
    meta = open_metastore(uri)
    try:
        store = ClusterStore(meta, CLUSTER)
        info = store.instance(broker.instance_id)
        assert info.tags == (BROKER_TAG,) and broker.url.endswith(f":{info.ports['http']}")
        assert broker.instance_id in store.live_instance_ids()
        assert httpx.get(broker.url + "/health", timeout=10).text == "OK"
        empty = httpx.post(broker.url + "/query/sql", json={"sql": "SELECT 1 FROM t"}, timeout=10).json()
        assert [e["errorCode"] for e in empty["exceptions"]] == [190]
        broker.stop()
        wait_until(lambda: broker.instance_id not in store.live_instance_ids(), message="live node removed")
    finally:
        broker.stop()
        meta.close()


def test_foreground_broker_prints_its_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(textwrap.dedent(f"""
        cluster = "{CLUSTER}"
        metadata = "sqlite://{tmp_path}/meta.db?{FAST_META}"
    """))
    proc = subprocess.Popen([sys.executable, "-m", "cuvee", "broker", "--config", str(config), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent())
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        assert httpx.get(url + "/health", timeout=10).text == "OK"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
