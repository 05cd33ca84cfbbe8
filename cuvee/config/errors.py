"""Validation errors for schemas and table configs: every problem at once, each with its JSON path."""

from __future__ import annotations

from dataclasses import dataclass

from cuvee.errors import UserError


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config document, located by a JSONPath-like path such as ``$.segmentsConfig.replication``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ConfigValidationError(UserError):
    """A schema or table config failed validation; ``issues`` lists every problem found, not just the first."""

    def __init__(self, what: str, issues: list[ConfigIssue]):
        self.what = what
        self.issues = list(issues)
        detail = "; ".join(str(i) for i in self.issues)
        super().__init__(f"invalid {what}: {detail}")

    def to_json(self) -> list[dict[str, str]]:
        return [{"path": i.path, "message": i.message} for i in self.issues]
