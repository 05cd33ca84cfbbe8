"""Small helpers shared by the metastore tests and their child processes."""

from __future__ import annotations

from cuvee.testing.waiting import wait_until

__all__ = ["wait_until"]
