"""The errors of the cluster-state layer: missing or duplicate records, failed commits, impossible assignments."""

from __future__ import annotations

from cuvee.errors import CuveeError, UserError


class ClusterStateError(CuveeError):
    """Base of the cluster-state errors."""


class RecordNotFoundError(ClusterStateError):
    """The record's node does not exist."""


class RecordExistsError(ClusterStateError):
    """A create found the record already there."""


class RequirementFailedError(ClusterStateError):
    """An update function found the base record in a state it must not change (iceberg's failed requirement).

    Raised by pure update functions and passed through unretried: re-reading would not help."""


class CommitConflictError(ClusterStateError):
    """A compare-and-set update lost the race to other writers on every one of its attempts."""


class AssignmentError(UserError):
    """Segments cannot be placed as asked (e.g. fewer tagged instances than replicas): the user must act."""
