from __future__ import annotations

import pytest

from cuvee.cluster.paths import ClusterPaths
from cuvee.errors import UserError
from cuvee.metastore.paths import check_path


def test_layout_matches_design() -> None:
    p = ClusterPaths("c1")
    assert p.root == "/cuvee/c1"
    assert p.instance("Server_1") == "/cuvee/c1/instances/Server_1"
    assert p.live("Server_1") == "/cuvee/c1/live/Server_1"
    assert p.leader == "/cuvee/c1/leader"
    assert p.schema("events") == "/cuvee/c1/schemas/events"
    assert p.table("events_REALTIME") == "/cuvee/c1/tables/events_REALTIME"
    assert p.segment("events_REALTIME", "events__0__0__20261121T1647Z") == (
        "/cuvee/c1/segments/events_REALTIME/events__0__0__20261121T1647Z"
    )
    assert p.ideal_state("events_REALTIME") == "/cuvee/c1/idealstate/events_REALTIME"
    assert p.current_state("Server_1", "events_REALTIME") == "/cuvee/c1/currentstate/Server_1/events_REALTIME"
    assert p.external_view("events_REALTIME") == "/cuvee/c1/externalview/events_REALTIME"


def test_every_path_is_valid_for_the_store() -> None:
    p = ClusterPaths("c1")
    for path in (p.instances, p.live_instances, p.schemas, p.tables, p.segments("t"), p.current_states("i")):
        assert check_path(path) == path


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".", "x\x00y"])
def test_names_that_would_change_the_path_are_refused(bad: str) -> None:
    with pytest.raises(UserError, match="invalid"):
        ClusterPaths("c1").segment("t_REALTIME", bad)
    with pytest.raises(UserError, match="cluster"):
        ClusterPaths(bad)
