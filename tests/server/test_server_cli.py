"""``cuvee server --config F``: config loading errors by key path, and the foreground process (URL on stdout,
healthy, clean exit on SIGTERM)."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from cuvee.config.errors import ConfigValidationError
from cuvee.server.config import ServerConfig, load_server_config

from tests.server.server_helpers import FAST_META


def test_config_file_with_nested_consumer_table(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text(textwrap.dedent(f"""
        metadata = "sqlite://{tmp_path}/meta.db"
        deep_store = "file://{tmp_path}/deep"
        data_dir = "{tmp_path}/data"
        tags = ["T1_REALTIME"]
        ideal_state_poll_seconds = 0.5
        [consumer]
        fetch_max_messages = 500
    """))
    config = load_server_config(path, {"port": 1234})
    assert config.tags == ("T1_REALTIME",) and config.port == 1234
    assert config.consumer.fetch_max_messages == 500
    assert ServerConfig().tags == ("DefaultTenant_REALTIME", "DefaultTenant_OFFLINE")


def test_config_mistakes_are_reported_by_key_path(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text('ideal_state_poll_seconds = "soon"\nnope = 1\n[consumer]\nfetch_max_messages = -1\n')
    with pytest.raises(ConfigValidationError) as err:
        load_server_config(path)
    text = str(err.value)
    assert "$.ideal_state_poll_seconds" in text and "$.nope" in text and "fetch_max_messages" in text


def test_group_by_bounds_are_read_from_toml_and_checked(tmp_path: Path) -> None:
    assert (ServerConfig().num_groups_limit, ServerConfig().min_server_group_trim_size) == (100_000, 5_000)
    path = tmp_path / "server.toml"
    path.write_text("num_groups_limit = 2000\nmin_server_group_trim_size = -1\n")
    config = load_server_config(path)
    assert (config.num_groups_limit, config.min_server_group_trim_size) == (2000, -1)
    for bad in ({"num_groups_limit": 0}, {"num_groups_limit": 2**31}, {"min_server_group_trim_size": 2**31}):
        with pytest.raises((ValueError, ConfigValidationError)):
            load_server_config(None, bad)


def test_register_adds_the_server_command() -> None:
    from cuvee.cli import role_cmd

    parser = argparse.ArgumentParser()
    role_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["server", "--config", "x.toml", "--port", "0"])
    assert args.config == "x.toml" and args.port == 0 and args.func is role_cmd.run and args.role.name == "server"


def test_foreground_server_prints_its_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(textwrap.dedent(f"""
        cluster = "c1"
        metadata = "sqlite://{tmp_path}/meta.db?{FAST_META}"
        deep_store = "file://{tmp_path}/deep"
        data_dir = "{tmp_path}/data"
    """))
    proc = subprocess.Popen([sys.executable, "-m", "cuvee", "server", "--config", str(config), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        assert httpx.get(url + "/health", timeout=10).json()["status"] == "OK"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
