"""Shared helpers for config tests: the Pinot-style example configs under fixtures/."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cuvee.config import ConfigValidationError

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixture_doc() -> Callable[[str], dict[str, Any]]:
    """A fresh parsed copy of fixtures/<name>.json, safe to mutate."""

    def load(name: str) -> dict[str, Any]:
        return json.loads((FIXTURES / f"{name}.json").read_text())

    return load


def issues_of(error: ConfigValidationError) -> dict[str, str]:
    """path -> message of every issue (tests look problems up by path)."""
    return {i.path: i.message for i in error.issues}
