"""Deep store fixtures: ``store`` runs the shared behaviour tests against every implementation."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.deepstore import open_deepstore
from cuvee.spi.deepstore import DeepStore


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DeepStore]:
    """One empty store per implementation: a local directory, and a fresh prefix of a bucket on moto's S3 server."""
    if request.param == "file":
        yield open_deepstore((tmp_path / "deep store").as_uri())
    else:
        s3 = request.getfixturevalue("moto_s3")
        yield open_deepstore(f"s3://{s3.bucket}/{uuid.uuid4().hex}/deep store", s3.settings)


@pytest.fixture
def local_file(tmp_path: Path):  # noqa: ANN201 - returns a small factory
    """``local_file(name, data)`` writes a source file outside the store and returns its path."""

    def write(name: str, data: bytes) -> Path:
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    return write
