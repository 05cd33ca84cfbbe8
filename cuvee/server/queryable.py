"""What a server can query: one segment, consuming or committed, behind one small protocol.

The query executor (``query_executor.py``) sees only ``QueryableSegment``; it never needs to know whether the rows
come from a MutableSegment's published prefix or from a committed segment's mapped files. The two adapters here
wrap the real objects for the registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import pyarrow as pa

from cuvee.segment.immutable import ImmutableSegment

if TYPE_CHECKING:  # the consuming package imports nothing from here; keep the dependency one-way at runtime
    from cuvee.server.consuming.segment import ConsumingSegment


@runtime_checkable
class QueryableSegment(Protocol):
    """One segment as the query executor sees it. ``to_arrow`` is a consistent snapshot in logical types."""

    name: str
    is_consuming: bool

    @property
    def num_docs(self) -> int: ...

    @property
    def last_ingestion_ms(self) -> int | None:
        """Wall time of the newest consumed row (consuming segments), None for committed ones."""
        ...

    def to_arrow(self) -> pa.Table: ...


class CommittedSegment:
    """A committed (immutable) segment as a QueryableSegment; also what the peer-download endpoint packs."""

    is_consuming = False
    last_ingestion_ms: int | None = None

    def __init__(self, segment: ImmutableSegment):
        self.segment = segment
        self.name = segment.name

    @property
    def num_docs(self) -> int:
        return self.segment.total_docs

    @property
    def crc(self) -> int:
        return self.segment.crc

    def to_arrow(self) -> pa.Table:
        return self.segment.to_arrow()

    def __repr__(self) -> str:
        return f"CommittedSegment({self.name!r}, docs={self.num_docs})"


class ConsumingView:
    """A consuming segment as a QueryableSegment: each ``to_arrow`` is the published prefix at that moment."""

    is_consuming = True

    def __init__(self, consuming: ConsumingSegment):
        self.consuming = consuming
        self.name: str = consuming.name

    @property
    def num_docs(self) -> int:
        return int(self.consuming.num_docs)

    @property
    def last_ingestion_ms(self) -> int | None:
        return self.consuming.last_ingestion_ms

    def to_arrow(self) -> pa.Table:
        return self.consuming.snapshot()

    def __repr__(self) -> str:
        return f"ConsumingView({self.name!r}, docs={self.num_docs})"
