"""The metadata store SPI, as every implementation must behave (nodes, versions, transactions, ephemerals)."""

from __future__ import annotations

import pytest

from cuvee.metastore.paths import InvalidPathError
from cuvee.spi.metastore import (
    ANY_VERSION,
    CheckVersion,
    Create,
    Delete,
    MetadataStore,
    MetadataStoreError,
    Node,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    SessionState,
    SetData,
    TransactionFailedError,
    VersionConflictError,
)
from tests.metastore.conftest import Backend


def test_create_get_exists_set_delete(store: MetadataStore) -> None:
    created = store.create("/cluster/tables/t1", b"config")
    assert created == Node("/cluster/tables/t1", b"config", 0, ephemeral=False)
    assert store.get("/cluster/tables/t1").data == b"config"
    assert store.exists("/cluster/tables/t1") == store.get("/cluster/tables/t1")
    assert store.exists("/cluster/tables/none") is None
    updated = store.set("/cluster/tables/t1", b"config-2")
    assert (updated.data, updated.version) == (b"config-2", 1)
    store.delete("/cluster/tables/t1")
    assert store.exists("/cluster/tables/t1") is None
    with pytest.raises(NoNodeError):
        store.get("/cluster/tables/t1")


def test_missing_nodes_raise_no_node(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError):
        store.set("/absent", b"x")
    with pytest.raises(NoNodeError):
        store.delete("/absent")
    with pytest.raises(NoNodeError):
        store.children("/absent")


def test_create_twice_raises_node_exists(store: MetadataStore) -> None:
    store.create("/a", b"1")
    with pytest.raises(NodeExistsError):
        store.create("/a", b"2")
    assert store.get("/a").data == b"1"


def test_make_parents(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError):
        store.create("/p/q/r", make_parents=False)
    assert store.exists("/p") is None
    store.create("/p/q/r", b"leaf")
    assert store.get("/p").data == b""
    assert store.get("/p/q").version == 0
    store.create("/p/q/s", make_parents=False)
    assert store.children("/p/q") == ["r", "s"]


def test_versions_grow_and_stale_writes_conflict(store: MetadataStore) -> None:
    store.create("/seg", b"v0")
    assert store.set("/seg", b"v1", expected_version=0).version == 1
    assert store.set("/seg", b"v2", expected_version=1).version == 2
    with pytest.raises(VersionConflictError, match="/seg.*re-read and retry"):
        store.set("/seg", b"stale", expected_version=1)
    assert store.get("/seg").data == b"v2"
    assert store.set("/seg", b"any", expected_version=ANY_VERSION).version == 3


def test_delete_with_stale_version_conflicts(store: MetadataStore) -> None:
    store.create("/d", b"")
    store.set("/d", b"x")
    with pytest.raises(VersionConflictError):
        store.delete("/d", expected_version=0)
    store.delete("/d", expected_version=1)
    assert store.exists("/d") is None


def test_children_are_sorted_names(store: MetadataStore) -> None:
    for name in ["zeta", "alpha", "mid", "alpha_2"]:
        store.create(f"/live/{name}")
    store.create("/live/mid/nested")
    store.create("/livelier")
    assert store.children("/live") == ["alpha", "alpha_2", "mid", "zeta"]
    assert store.children("/live/zeta") == []


def test_delete_non_empty_requires_recursive(store: MetadataStore) -> None:
    store.create("/tree/a/b", b"1")
    store.create("/tree/a/c", b"2")
    store.create("/tree_sibling", b"keep")
    with pytest.raises(NotEmptyError):
        store.delete("/tree")
    assert store.get("/tree/a/b").data == b"1"
    store.delete("/tree", recursive=True)
    assert store.exists("/tree") is None
    assert store.exists("/tree/a/c") is None
    assert store.get("/tree_sibling").data == b"keep"


def test_recursive_delete_checks_the_root_version(store: MetadataStore) -> None:
    store.create("/r/child")
    store.set("/r", b"bumped")
    with pytest.raises(VersionConflictError):
        store.delete("/r", expected_version=0, recursive=True)
    assert store.exists("/r/child") is not None
    with pytest.raises(NoNodeError):
        store.delete("/nothing", recursive=True)


def test_invalid_paths_are_rejected(store: MetadataStore) -> None:
    for bad in ["relative", "/trailing/", "/double//slash", "/dot/./x", ""]:
        with pytest.raises(InvalidPathError):
            store.create(bad)
    with pytest.raises(MetadataStoreError, match="root"):
        store.delete("/")
    with pytest.raises(NodeExistsError):
        store.create("/")


def test_transaction_applies_all_ops(store: MetadataStore) -> None:
    store.create("/tx/seg", b"IN_PROGRESS")
    store.create("/tx/old", b"")
    results = store.transaction(
        [
            CheckVersion("/tx/seg", 0),
            SetData("/tx/seg", b"DONE", expected_version=0),
            Create("/tx/next", b"IN_PROGRESS"),
            Delete("/tx/old"),
        ]
    )
    assert results[0] is None and results[3] is None
    assert (results[1].data, results[1].version) == (b"DONE", 1)  # type: ignore[union-attr]
    assert (results[2].path, results[2].version) == ("/tx/next", 0)  # type: ignore[union-attr]
    assert store.get("/tx/seg").data == b"DONE"
    assert store.get("/tx/next").data == b"IN_PROGRESS"
    assert store.children("/tx") == ["next", "seg"]


def test_transaction_is_all_or_nothing(store: MetadataStore) -> None:
    store.create("/tx/seg", b"IN_PROGRESS")
    store.set("/tx/seg", b"moved on")
    with pytest.raises(TransactionFailedError) as failure:
        store.transaction([Create("/tx/next", b"x"), SetData("/tx/seg", b"DONE", expected_version=0)])
    assert failure.value.failed_op == 1
    assert isinstance(failure.value.cause, VersionConflictError)
    assert store.exists("/tx/next") is None
    assert store.get("/tx/seg").data == b"moved on"


@pytest.mark.parametrize(
    ("ops", "failed_op", "cause"),
    [
        ([Create("/tx/a"), Create("/tx/a")], 1, NodeExistsError),
        ([Create("/tx/a"), CheckVersion("/tx/absent", 0)], 1, NoNodeError),
        ([Delete("/tx")], 0, NotEmptyError),
        ([Create("/tx/a"), Create("/tx/no/parent")], 1, NoNodeError),
        ([CheckVersion("/tx/base", 3), Create("/tx/a")], 0, VersionConflictError),
    ],
)
def test_transaction_names_the_failing_op(
    store: MetadataStore, ops: list[object], failed_op: int, cause: type[Exception]
) -> None:
    store.create("/tx/base")
    with pytest.raises(TransactionFailedError) as failure:
        store.transaction(ops)  # type: ignore[arg-type]
    assert failure.value.failed_op == failed_op
    assert isinstance(failure.value.cause, cause)
    assert f"op #{failed_op}" in str(failure.value)
    assert store.children("/tx") == ["base"]


def test_ephemeral_nodes_vanish_when_their_session_closes(backend: Backend) -> None:
    holder, observer = backend.open(), backend.open()
    assert holder.session_id != observer.session_id
    node = holder.create("/live/server-1", b"host:port", ephemeral=True)
    assert node.ephemeral
    assert observer.get("/live/server-1").ephemeral
    assert not observer.get("/live").ephemeral
    holder.close()
    assert observer.exists("/live/server-1") is None
    assert observer.exists("/live") is not None


def test_ephemeral_nodes_cannot_have_children(store: MetadataStore) -> None:
    store.create("/eph", ephemeral=True)
    with pytest.raises(MetadataStoreError, match="ephemeral"):
        store.create("/eph/child")


def test_closed_client_refuses_calls(backend: Backend) -> None:
    store = backend.open()
    assert store.state is SessionState.CONNECTED
    store.close()
    store.close()  # idempotent
    with pytest.raises(SessionExpiredError):
        store.get("/")


def test_a_second_client_sees_the_first_clients_writes(backend: Backend) -> None:
    writer, reader = backend.open(), backend.open()
    writer.create("/shared/x", b"1")
    assert reader.get("/shared/x").data == b"1"
    reader.set("/shared/x", b"2", expected_version=0)
    with pytest.raises(VersionConflictError):
        writer.set("/shared/x", b"lost update", expected_version=0)
