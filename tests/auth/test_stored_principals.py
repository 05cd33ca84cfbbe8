"""Principals kept in the metadata store: their record, the refresh that moves a generation, and an authenticator
that counts them beside the config's, forgetting cached checks when they change."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from cuvee.auth.config import AuthConfig, PrincipalConfig
from cuvee.auth.layer import Authenticator
from cuvee.auth.secrets import hash_password, hash_token
from cuvee.auth.stored import PrincipalRecord, StoredPrincipals
from cuvee.cluster._json import RecordFormatError
from cuvee.cluster.store import ClusterStore
from cuvee.metastore import open_metastore


def _basic(name: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()


@pytest.fixture()
def store(tmp_path: Path) -> ClusterStore:
    return ClusterStore(open_metastore(f"sqlite:///{tmp_path / 'meta.db'}"), "test")


def _put(store: ClusterStore, config: PrincipalConfig) -> None:
    store.put(store.paths.principal(config.name), PrincipalRecord(config))


def test_the_record_keeps_hashes_and_refuses_what_a_config_would() -> None:
    config = PrincipalConfig("a", password=hash_password("pw", n=2**10), tables=("events",),
                             permissions=("READ", "UPDATE"))
    assert PrincipalRecord.decode(PrincipalRecord(config).encode()).config == config
    with pytest.raises(RecordFormatError):
        PrincipalRecord.from_json({"name": "a", "password": "plain-text", "tables": ["*"], "permissions": ["READ"]})
    with pytest.raises(RecordFormatError):  # no table list is no table, not every table
        PrincipalRecord.from_json({"name": "a", "token": hash_token("t"), "permissions": ["READ"]})
    with pytest.raises(RecordFormatError):
        PrincipalRecord.from_json({"name": "a", "token": hash_token("t"), "tables": ["*"], "permissions": ["ALL"]})


def test_refresh_moves_the_generation_only_when_something_changed(store: ClusterStore) -> None:
    stored = StoredPrincipals(store, refresh_seconds=60)
    assert not stored.refresh() and stored.generation == 0
    _put(store, PrincipalConfig("a", token=hash_token("t" * 20)))
    assert stored.refresh() and stored.generation == 1 and stored.get("a") is not None
    assert not stored.refresh() and stored.generation == 1
    store.metastore.create(store.paths.principal("broken"), b"{not json")
    assert not stored.refresh()  # a node that does not decode is skipped, the others stay
    store.delete(store.paths.principal("a"))
    assert stored.refresh() and stored.get("a") is None and stored.generation == 2


def test_the_authenticator_counts_stored_principals_and_forgets_cached_checks_when_they_change(
        store: ClusterStore) -> None:
    config = AuthConfig(enabled=True, internal_token="i" * 20,
                        principals=(PrincipalConfig("admin", password=hash_password("config-pw", n=2**10),
                                                    admin=True),))
    stored = StoredPrincipals(store, refresh_seconds=60)
    auth = Authenticator(config, stored=stored)
    header = _basic("b", "stored-pw")
    assert auth.authenticate(header) is None
    _put(store, PrincipalConfig("b", password=hash_password("stored-pw", n=2**10), tables=("events",)))
    assert auth.authenticate(header) is None  # a failure is cached until the store's principals change
    stored.refresh()
    found = auth.authenticate(header)
    assert found is not None and found.name == "b" and found.tables == frozenset({"events"})
    assert auth.cached(header) == (True, found)
    token = "a-token-of-enough-length-1234"
    _put(store, PrincipalConfig("c", token=hash_token(token)))
    _put(store, PrincipalConfig("admin", password=hash_password("stored-admin-pw", n=2**10)))
    stored.refresh()
    assert auth.cached(header) == (False, None)  # the generation moved: checked again
    assert auth.authenticate(f"Bearer {token}") is not None
    assert auth.authenticate(_basic("admin", "config-pw")) is not None  # the config's principal wins its name
    assert auth.authenticate(_basic("admin", "stored-admin-pw")) is None
    store.delete(store.paths.principal("b"))
    stored.refresh()
    assert auth.authenticate(header) is None


def test_a_slow_read_that_began_before_a_change_cannot_bring_the_old_principals_back(store: ClusterStore) -> None:
    import threading

    _put(store, PrincipalConfig("bob", token=hash_token("b" * 20)))
    stored = StoredPrincipals(store, refresh_seconds=60)
    stored.refresh()
    entered, release = threading.Event(), threading.Event()
    real_find = store.find

    def stalled_find(cls, path):  # noqa: ANN001, ANN202
        found = real_find(cls, path)  # read before the change ...
        if threading.current_thread().name == "slow":
            entered.set()
            release.wait(5)  # ... and held while the change and its refresh happen
        return found

    store.find = stalled_find  # type: ignore[method-assign]
    slow = threading.Thread(target=stored.refresh, name="slow")
    slow.start()
    assert entered.wait(5)
    store.delete(store.paths.principal("bob"))
    done = threading.Thread(target=stored.refresh)  # the change's own refresh waits for the slow one, then reads
    done.start()
    release.set()
    slow.join(5)
    done.join(5)
    assert stored.get("bob") is None
