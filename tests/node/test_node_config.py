from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cuvee.config.errors import ConfigValidationError
from cuvee.errors import UserError
from cuvee.node.config import config_from_dict, config_to_dict, load_config


@dataclass(frozen=True)
class Timeouts:
    commit_seconds: float = 30.0
    retries: int = 3


@dataclass(frozen=True)
class RoleConfig:
    metadata: str
    port: int = 0
    tags: tuple[str, ...] = ("DefaultTenant",)
    deep_store: str | None = None
    verbose: bool = False
    timeouts: Timeouts = field(default_factory=Timeouts)


def test_defaults_and_nested_tables(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('metadata = "sqlite:///x.db"\nport = 9000\n[timeouts]\ncommit_seconds = 2\n')
    config = load_config(RoleConfig, path)
    assert config == RoleConfig(metadata="sqlite:///x.db", port=9000, timeouts=Timeouts(commit_seconds=2.0))
    assert isinstance(config.timeouts.commit_seconds, float)


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('metadata = "a"\n')
    config = load_config(RoleConfig, path, {"port": 1234, "timeouts.retries": 9})
    assert (config.port, config.timeouts.retries) == (1234, 9)


def test_every_mistake_is_reported_with_its_path() -> None:
    with pytest.raises(ConfigValidationError) as err:
        config_from_dict(RoleConfig, {"port": "x", "colour": 1, "timeouts": {"retries": 1.5}, "tags": [1]})
    paths = {issue.path for issue in err.value.issues}
    assert paths == {"$.metadata", "$.port", "$.colour", "$.timeouts.retries", "$.tags[0]"}


def test_missing_and_invalid_files_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_config(RoleConfig, tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("metadata = \n")
    with pytest.raises(UserError, match="not valid TOML"):
        load_config(RoleConfig, bad)


def test_round_trip_through_a_dict() -> None:
    config = RoleConfig(metadata="m", deep_store="file:///d", tags=("a", "b"))
    assert config_from_dict(RoleConfig, config_to_dict(config)) == config
