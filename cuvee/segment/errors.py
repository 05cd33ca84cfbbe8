"""Errors raised by immutable segments: a caller can tell a damaged segment from a wrong request."""

from __future__ import annotations

from cuvee.errors import CuveeError


class SegmentError(CuveeError):
    """A request a segment cannot serve (unknown column, index not built for a column, ...)."""


class CorruptSegmentError(SegmentError):
    """A segment directory or archive is damaged: CRC mismatch, missing or unreadable files, unsafe archive."""
