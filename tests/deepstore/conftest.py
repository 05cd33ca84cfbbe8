"""Deep store fixtures: ``store`` runs the shared behaviour tests against every implementation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.deepstore import open_deepstore
from cuvee.spi.deepstore import DeepStore


@pytest.fixture(params=["file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DeepStore]:
    """One empty store per implementation (S3 joins this list when it exists)."""
    if request.param == "file":
        yield open_deepstore((tmp_path / "deep store").as_uri())


@pytest.fixture
def local_file(tmp_path: Path):  # noqa: ANN201 - returns a small factory
    """``local_file(name, data)`` writes a source file outside the store and returns its path."""

    def write(name: str, data: bytes) -> Path:
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    return write
