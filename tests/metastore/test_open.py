"""Choosing and configuring a store from its URI; mistakes are UserErrors that say what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvee.errors import UserError
from cuvee.metastore import open_metastore
from cuvee.metastore.sqlite import SqliteMetadataStore
from cuvee.testing.zookeeper import ZooKeeperServer


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("etcd://h:1/x", "unknown metadata store URI scheme 'etcd'"),
        ("meta.db", "unknown metadata store URI scheme ''"),
        ("sqlite://relative.db", "three slashes"),
        ("sqlite:///", "three slashes"),
        ("sqlite:///{tmp}/m.db?session_timout=3", "unknown option 'session_timout'"),
        ("sqlite:///{tmp}/m.db?session_timeout=soon", "not a number of seconds"),
        ("sqlite:///{tmp}/m.db?poll_interval=0", "poll_interval must be > 0"),
        ("sqlite:///{tmp}/m.db?session_timeout=1&heartbeat_interval=0.5", "heartbeat_interval"),
        ("sqlite:///{tmp}/m.db?session_timeout=2&suspend_after=3", "suspend_after must be below session_timeout"),
        ("sqlite:///{tmp}/missing-dir/m.db", "does not exist"),
        ("zk://localhost/cuvee", "zk://host:port"),
        ("zk://h:99999/cuvee", "zk://host:port"),
        ("zk:///cuvee", "zk://host:port"),
        ("zk://h:2181/a//b", "not a valid path"),
        ("zk://h:2181/c?request_timeout=-1", "request_timeout must be > 0"),
    ],
)
def test_bad_uris_are_user_errors(tmp_path: Path, uri: str, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("?", r"\?")):
        open_metastore(uri.format(tmp=str(tmp_path).lstrip("/")))


def test_sqlite_uri_options_are_applied(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path}/m.db?session_timeout=4&heartbeat_interval=0.2&poll_interval=0.01"
    with open_metastore(uri) as store:
        assert isinstance(store, SqliteMetadataStore)
        assert store._options.session_timeout == 4.0
        assert store._options.effective_suspend_after == pytest.approx(4 / 3)
        store.create("/x", b"1")
    with open_metastore(f"sqlite://{tmp_path}/m.db") as reopened:
        assert reopened.get("/x").data == b"1"  # persistent nodes outlive every session


def test_unreachable_zookeeper_is_unavailable_quickly() -> None:
    from cuvee.spi.metastore import StoreUnavailableError
    from cuvee.testing.zookeeper import free_port

    with pytest.raises(StoreUnavailableError, match="cannot connect to ZooKeeper"):
        open_metastore(f"zk://127.0.0.1:{free_port()}/x?connect_timeout=0.5")


def test_zookeeper_server_without_java_says_what_to_install() -> None:
    with pytest.raises(UserError, match="not on PATH"):
        ZooKeeperServer(java="no-such-java-binary").start()


@pytest.mark.zookeeper
def test_zookeeper_chroot_is_created_and_isolates(zookeeper: ZooKeeperServer) -> None:
    with open_metastore(zookeeper.zk_uri("/iso/a")) as a, open_metastore(zookeeper.zk_uri("/iso/b")) as b:
        a.create("/only-in-a")
        assert b.exists("/only-in-a") is None
        assert b.children("/") == []
    with open_metastore(zookeeper.zk_uri("/iso")) as parent:
        assert parent.children("/") == ["a", "b"]
        assert parent.children("/a") == ["only-in-a"]
