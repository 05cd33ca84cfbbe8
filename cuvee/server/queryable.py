"""What a server can query: one segment, consuming or committed, behind one small protocol.

The query executor (``query_executor.py``) sees only ``QueryableSegment``; it never needs to know whether the rows
come from a MutableSegment's published prefix or from a committed segment's mapped files. The two adapters here
wrap the real objects for the registry.

Queries read segments through ``query_table`` rather than ``to_arrow``: the same rows and logical types, but
single-value dictionary columns stay ``pa.DictionaryArray`` (ids over the segment's dictionary). DuckDB scans those
as their values, so a query no longer decodes every dictionary column of every segment it touches (that decode
was most of a server's time per query, and it grows with the rows held). A committed segment's query table is
built once (zero-copy over its mapped files) and reused.

DuckDB scans a plain Arrow array faster than a dictionary one (1M rows in 8 segments, medians on 2 cores:
``UserID = x`` 4.1 ms plain vs 7.2 ms encoded; ``GROUP BY CounterID`` 18.7 vs 25.9 ms; a range count on
``EventDate`` 22.1 vs 30.0 ms; ``ORDER BY SearchPhrase LIMIT 10`` 16.4 vs 27.1 ms). So a committed segment decodes
a dictionary column a query reads once, and keeps the plain copy when it costs at most ``PLAIN_BYTES_FACTOR``
times the encoded column (ids and dictionary). A string dictionary is decoded by every scan anyway: DuckDB has
pyarrow build each segment's plain strings per query, and on a server's allocators (``cuvee.server.memory``) those
multi-MB buffers are fresh mappings each time; keeping the copy took ``GROUP BY CounterID`` over ``length(URL)``
(1,250 URLs per 125k-row segment, a copy ~9× the encoded column) from 99 to 42 ms and the ``CounterID = 62``
page-view reports from ~150 to ~70 ms. Only a column whose copy would cost more than the factor (a few very long
values) stays encoded. The copies of all a server's segments share one byte budget (``cuvee.server.plain_copies``,
the server's ``plain_copy_bytes``): copies idle for a while are dropped to make room, and decoded again when read;
a column finding no room is scanned encoded for a while (no thrashing when the columns read outgrow the budget).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from functools import cached_property
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import pyarrow as pa

from cuvee.pruning.facts import facts_of
from cuvee.pruning.pruner import SegmentFacts
from cuvee.segment.encoding import combine
from cuvee.segment.immutable import ImmutableSegment
from cuvee.server.plain_copies import PLAIN_COPIES, Kept, PlainCopies

PLAIN_BYTES_FACTOR = 16  # a decoded copy kept at most this many times the encoded column's bytes

if TYPE_CHECKING:  # the consuming package imports nothing from here; keep the dependency one-way at runtime
    from cuvee.server.consuming.blocks import OpenBlock, SealedBlock
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

    def __init__(self, segment: ImmutableSegment, copies: PlainCopies = PLAIN_COPIES):
        """``copies``: where its plain copies are kept, under the server's budget."""
        self.segment = segment
        self.name = segment.name
        self._query_table: pa.Table | None = None
        self._copies = copies
        self._token = copies.owner(self)
        self._encoded: set[str] = set()  # columns scanned encoded: their copies cost too much

    @property
    def num_docs(self) -> int:
        return self.segment.total_docs

    @property
    def crc(self) -> int:
        return self.segment.crc

    @cached_property
    def facts(self) -> SegmentFacts:
        """What pruning reads about it (``cuvee.pruning``): stats, partitions, bloom filters."""
        return facts_of(self.segment)

    def to_arrow(self) -> pa.Table:
        return self.segment.to_arrow()

    def query_table(self) -> pa.Table:
        """The rows for queries: dictionary columns as ids over the mapped dictionary, built on first use."""
        table = self._query_table
        if table is None:  # two first queries may both build it: the same zero-copy table, no harm
            table = self._query_table = self.segment.to_arrow(decode=False)
        return table

    def with_plain(self, table: pa.Table) -> pa.Table:
        """``table`` (columns of ``query_table``, e.g. those a query reads) with each dictionary column whose
        plain copy is worth keeping (see the module doc) swapped for it, decoded on first use."""
        for i, field in enumerate(table.schema):
            if pa.types.is_dictionary(field.type):
                plain = self._plain_column(field.name)
                if plain is not None:
                    table = table.set_column(i, pa.field(field.name, plain.type), plain)
        return table

    def _plain_column(self, name: str) -> pa.Array | None:
        """The kept copy of ``name``, decoded now when it is not kept (first read, or dropped for room); None when
        the column is scanned encoded (a copy over ``PLAIN_BYTES_FACTOR`` times it, or over the whole budget)."""
        if name in self._encoded:
            return None
        plain = self._copies.get(self._token, name)
        if plain is not None:
            return plain
        if not self._copies.worth_decoding(self._token, name):
            return None  # declined lately: the budget is full of copies in use
        encoded = self.query_table().column(name)
        plain = self.segment.column(name, decode=True)  # two first readers may both decode: the same values
        if plain.nbytes > PLAIN_BYTES_FACTOR * encoded.nbytes:
            self._encoded.add(name)
            return None
        kept = self._copies.put(self._token, name, plain)
        if kept is Kept.TOO_BIG:
            self._encoded.add(name)
            return None
        return plain  # decoded already: this query scans it even when it was declined (and then let go)

    def __repr__(self) -> str:
        return f"CommittedSegment({self.name!r}, docs={self.num_docs})"


class ConsumingView:
    """A consuming segment as a QueryableSegment: each ``to_arrow`` is the published prefix at that moment."""

    is_consuming = True

    def __init__(self, consuming: ConsumingSegment):
        self.consuming = consuming
        self.name: str = consuming.name

    @functools.cached_property
    def schema(self) -> pa.Schema:
        """The columns as stored, in logical types (what its sealed blocks' copies hold)."""
        return self.consuming.schema.arrow_schema()

    @property
    def num_docs(self) -> int:
        return int(self.consuming.num_docs)

    @property
    def last_ingestion_ms(self) -> int | None:
        return self.consuming.last_ingestion_ms

    def to_arrow(self) -> pa.Table:
        return self.consuming.snapshot()

    def query_table(self, *, past_cap: bool = False, columns: Collection[str] | None = None) -> pa.Table:
        """The published prefix for queries, single-value dictionary columns left encoded (see the module doc);
        ``past_cap``: rows past the cap too (an upsert table's reader, filtering by valid docs); ``columns``: only
        those (a query's: the rest would be built for nothing), default all."""
        return self.consuming.encoded_snapshot(past_cap=past_cap, columns=columns)

    def sealed_blocks(self, count: int) -> list[SealedBlock]:
        """The sealed blocks (``cuvee.server.consuming.blocks``) among the first ``count`` rows of a query table:
        rows a DuckDB copy may answer for, in row order."""
        return self.consuming.sealed_blocks(count)

    def open_blocks(self, count: int) -> dict[int, OpenBlock]:
        """The blocks among the first ``count`` rows of a query table not sealed or not copied yet, whose rows a
        DuckDB tail table may hold (``cuvee.server.consuming.blocks.OpenBlock``), by block index."""
        return self.consuming.open_blocks(count)

    def follow(self, follower: Callable[[OpenBlock, int], None]) -> None:
        """Have ``follower`` told, after each batch, of the rows the open block then holds: a DuckDB tail table
        appended ahead of the next query (``NativeCopies.follow``)."""
        self.consuming.follow(follower)

    def __repr__(self) -> str:
        return f"ConsumingView({self.name!r}, docs={self.num_docs})"


def query_table(segment: QueryableSegment) -> pa.Table:
    """What a query reads of ``segment``: its encoded query table when it offers one, else ``to_arrow()``."""
    encoded = getattr(segment, "query_table", None)
    return encoded() if callable(encoded) else segment.to_arrow()


def encoded_logical_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``'s logical types, keeping single-value dictionary columns encoded (a dictionary of
    another value type is cast, which costs only its distinct values); multi-value dictionary columns are decoded."""
    arrays: list[pa.Array] = []
    fields: list[pa.Field] = []
    for field in schema:
        arr = combine(table.column(field.name))
        if pa.types.is_dictionary(arr.type) and not pa.types.is_list(field.type):
            if arr.type.value_type != field.type:
                arr = pa.DictionaryArray.from_arrays(arr.indices, arr.dictionary.cast(field.type))
            fields.append(pa.field(field.name, arr.type))
        else:
            arr = _decoded(arr)
            arr = arr if arr.type == field.type else arr.cast(field.type)
            fields.append(field)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _decoded(arr: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(arr.type):
        return arr.dictionary.take(arr.indices)
    if pa.types.is_list(arr.type) and pa.types.is_dictionary(arr.type.value_type):
        child = arr.values
        values = child.dictionary.take(child.indices)
        return pa.ListArray.from_arrays(arr.offsets, values, mask=arr.is_null() if arr.null_count else None)
    return arr
