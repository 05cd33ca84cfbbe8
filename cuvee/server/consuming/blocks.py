"""A consuming segment's rows as queries read them: sealed blocks converted once, only the open tail per query.

A query over a consuming segment used to read the whole published prefix as Arrow, every time: cheap to build
(single-value columns are views over the segment's buffers), but DuckDB scanned every row through its Arrow
reader (dictionary ids, pyarrow filters), two to five times slower than the DuckDB copy of the same rows
committed (``cuvee.server.native_copies``), and multi-value columns were decoded whole on every query.

The rows a segment has published never change (the writer only appends; dictionary ids are never reassigned),
so they are cut into blocks of ``block_rows`` (by default one DuckDB row group: the cheapest copy, see
``ConsumerConfig``). A block is *sealed* once all its rows are published, and is then immutable:

- each sealed block is a ``SealedBlock``, which the server's DuckDB copies take like a committed segment (its
  rows decoded once, by the copies' worker, in the background). A query that reads natively scans the copied
  blocks in DuckDB and only the rest as Arrow: the open tail (rows since the last seal) and blocks whose copy is
  not made yet. The copies count against ``native_copy_bytes`` like committed ones, and are deleted when the
  block is collected (the segment committed or released);
- multi-value columns, which every query decodes (DuckDB does not read lists of dictionary ids), are decoded once
  per sealed block and kept until the block's DuckDB copy is seen ready (``SealedBlock.copied``: queries then read
  its rows there; one reading it as Arrow decodes them for itself); the tail's per query. What blocks keep
  (``bytes_kept``) is part of the segment's ``bytes_used``: its ``memoryBytes`` and its memory-limit end check.

- the open block (rows since the last seal) is an ``OpenBlock`` whose rows a query reading natively scans from a
  DuckDB *tail table* beside the copies (``NativeCopies``): scanning them as an Arrow table beside DuckDB's own
  cost a roughly fixed ~1.5–2.5 ms per query, whatever their number. The first query that reads the block makes
  the table; after that the consume thread tells the scan of each batch (``published``: one enqueue) and the
  copies' worker appends it (``follow``), so queries find the rows there. A block keeps its tail table once
  sealed, until its copy is seen ready (``SealedBlock.copied``) or the segment leaves; a block sealed without one
  (its rows never read while open) is read as Arrow until its copy is made — a query never inserts a whole block.

A query sees a consistent prefix: it reads ``count`` rows once, every block it uses ends at or below it, and it
reads a tail table's rows below ``count`` only (a later query may have appended more).
Blocks are cut at fixed multiples of ``block_rows`` (never where a batch happened to end), made by the first
reader that needs them: a query, or — for a partial-upsert table only — the consume thread itself, which reads the
previous versions of updated keys from the segment (``cuvee.upsert.table._rows_at``, through
``encoded_snapshot``), cutting blocks and decoding their multi-value columns there. Otherwise the consume thread
does no extra work: blocks are copied by the copies' worker, their columns decoded by queries.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection

import pyarrow as pa

from cuvee.config import Schema
from cuvee.segment.mutable import MutableSegment
from cuvee.server.consuming.build import logical_table
from cuvee.server.consuming.config import DEFAULT_BLOCK_ROWS
from cuvee.server.queryable import encoded_logical_table

log = logging.getLogger(__name__)

_SHAPES_KEPT = 256  # lists of columns remembered per segment (``ConsumingScan._shape``)


class SealedBlock:
    """Rows ``start`` to ``end`` of a consuming segment, all published: what its DuckDB copy is made from."""

    def __init__(self, scan: ConsumingScan, index: int, start: int, end: int) -> None:
        self.name = f"{scan.mutable.name}#{index}"
        self.start, self.end = start, end
        self._scan = scan
        self._multi: dict[str, pa.Array] = {}  # multi-value columns decoded
        self._copied = False  # its DuckDB copy was seen ready: decoded columns are no longer kept

    @property
    def total_docs(self) -> int:
        return self.end - self.start

    def to_arrow(self, decode: bool = True) -> pa.Table:
        """The block's rows in the schema's logical types (dictionaries decoded): its native copy's rows."""
        scan = self._scan
        return logical_table(scan.mutable.snapshot(self.end, first_doc=self.start), scan.schema)

    def multi_value(self, name: str) -> pa.Array:
        """Multi-value column ``name`` of the block, decoded (on first use, then kept until ``copied``)."""
        found = self._multi.get(name)
        if found is None:
            found = self._scan.decoded(name, self.start, self.end)
            if not self._copied:  # two first readers may both decode: the same values, one kept
                found = self._multi.setdefault(name, found)
        return found

    def copied(self) -> None:
        """Its DuckDB copy is ready: queries reading natively take its rows there, so its decoded multi-value
        columns are dropped and no longer kept (a query reading it as Arrow decodes them for itself), and so is
        its ``OpenBlock`` (its DuckDB tail table goes once no query reads it)."""
        self._copied = True
        self._multi = {}
        self._scan.forget_open(self.start // self._scan.block_rows)

    def bytes_kept(self) -> dict[str, int]:
        return {name: array.nbytes for name, array in list(self._multi.items())}

    def __repr__(self) -> str:
        return f"SealedBlock({self.name!r}, rows {self.start}..{self.end})"


class OpenBlock:
    """Block ``index`` of a consuming segment while rows are still published into it (and, once sealed, until its
    copy is ready): what its DuckDB tail table is made from (``NativeCopies``), by the first query that reads it,
    then appended after each batch by the copies' worker (``follow``), or by a query finding it behind. Its table
    goes when the object is collected: once the sealed block's copy is seen ready (``SealedBlock.copied``) or the
    segment leaves (``release``)."""

    def __init__(self, scan: ConsumingScan, index: int) -> None:
        self.name = f"{scan.mutable.name}#{index}+"
        self.start = index * scan.block_rows
        self.end = self.start + scan.block_rows  # its table never holds a row past the block
        self._scan = scan

    def rows(self, start: int, end: int) -> pa.Table:
        """Rows ``start`` to ``end`` (all published) in the schema's logical types: the rows of a block's copy."""
        return logical_table(self._scan.mutable.snapshot(end, first_doc=start), self._scan.schema)

    def __repr__(self) -> str:
        return f"OpenBlock({self.name!r}, rows from {self.start})"


class ConsumingScan:
    """The query view of one consuming segment's ``mutable`` under ``schema``, in blocks of ``block_rows``."""

    def __init__(self, mutable: MutableSegment, schema: Schema, block_rows: int = DEFAULT_BLOCK_ROWS) -> None:
        if block_rows <= 0:
            raise ValueError(f"block_rows must be positive, got {block_rows}")
        self.mutable = mutable
        self.schema = schema
        self.block_rows = block_rows
        self._logical = schema.arrow_schema()
        self._blocks: list[SealedBlock] = []
        self._open: dict[int, OpenBlock] = {}  # by block index: the open block's, and sealed ones' not copied yet
        self._follower: Callable[[OpenBlock, int], None] | None = None
        self._lock = threading.Lock()
        self._shapes: dict[tuple[str, ...] | None, tuple[pa.Schema, pa.Schema, list[str]]] = {}

    def blocks(self, count: int) -> list[SealedBlock]:
        """The sealed blocks among the first ``count`` published rows, in row order."""
        sealed = count // self.block_rows
        blocks = self._blocks
        if len(blocks) < sealed:
            with self._lock:
                while len(self._blocks) < sealed:
                    index = len(self._blocks)
                    start = index * self.block_rows
                    self._blocks = self._blocks + [SealedBlock(self, index, start, start + self.block_rows)]
                blocks = self._blocks
        return blocks[:sealed]

    def open_blocks(self, count: int) -> dict[int, OpenBlock]:
        """The ``OpenBlock`` of each block a query of the first ``count`` rows may read from a DuckDB tail table
        (by block index): the block still open at ``count`` (made now), and blocks sealed since whose copies were
        not seen ready yet (made while they were open; a sealed block never gets one anew — copying it is the
        copies' worker's job, not a query's)."""
        index, rows = divmod(count, self.block_rows)
        with self._lock:
            if rows and index not in self._open:
                self._open[index] = OpenBlock(self, index)
            return {i: block for i, block in self._open.items() if i * self.block_rows < count}

    def follow(self, follower: Callable[[OpenBlock, int], None]) -> None:
        """Call ``follower(block, count)`` after each batch published from now on, for each ``OpenBlock`` holding
        rows below ``count`` (the server's DuckDB copies, once a query made a tail table: they append the rows in
        the background, so the next query finds them there)."""
        self._follower = follower

    def published(self, count: int) -> None:
        """The consume thread published rows up to ``count``: tell the follower (it only enqueues), if any."""
        follower = self._follower
        if follower is None:
            return
        with self._lock:
            blocks = [block for block in self._open.values() if block.start < count]
        for block in blocks:
            try:
                follower(block, count)
            except Exception:  # noqa: BLE001 - the tail table is an optimisation: consumption goes on regardless
                log.exception("a consuming segment's tail table could not be told of new rows; queries append them")

    def forget_open(self, index: int) -> None:
        """Block ``index``'s tail table is no longer read (its copy is ready)."""
        with self._lock:
            self._open.pop(index, None)

    def table(self, count: int, columns: Collection[str] | None = None) -> pa.Table:
        """The first ``count`` rows for queries (``columns`` only, in schema order; default all): single-value
        dictionary columns left encoded (views over the segment's buffers), multi-value columns decoded (sealed
        blocks' kept, the tail's now)."""
        logical, single, multi = self._shape(columns)
        encoded = encoded_logical_table(self.mutable.snapshot(count, columns=single.names), single)
        if not multi:
            return encoded
        blocks = self.blocks(count)
        tail = blocks[-1].end if blocks else 0
        arrays: dict[str, pa.ChunkedArray] = {}
        for name in multi:
            chunks = [block.multi_value(name) for block in blocks] + [self.decoded(name, tail, count)]
            arrays[name] = pa.chunked_array(chunks, type=chunks[-1].type)
        out = [arrays[f.name] if f.name in arrays else encoded.column(f.name) for f in logical]
        fields = [f if f.name in arrays else encoded.schema.field(f.name) for f in logical]
        return pa.Table.from_arrays(out, schema=pa.schema(fields))

    def _shape(self, columns: Collection[str] | None) -> tuple[pa.Schema, pa.Schema, list[str]]:
        """The columns read (schema order), the single-value ones among them, the multi-value ones' names:
        remembered per list of columns (a query's, repeated; building them cost more than the rest of a view)."""
        key = None if columns is None else tuple(columns)
        shape = self._shapes.get(key)
        if shape is None:
            logical = self._logical if columns is None else pa.schema([f for f in self._logical if f.name in columns])
            shape = (logical, pa.schema([f for f in logical if not pa.types.is_list(f.type)]),
                     [f.name for f in logical if pa.types.is_list(f.type)])
            if len(self._shapes) >= _SHAPES_KEPT:
                self._shapes.clear()
            self._shapes[key] = shape
        return shape

    def decoded(self, name: str, start: int, end: int) -> pa.Array:
        """Multi-value column ``name``'s rows ``start`` to ``end``, decoded to its logical type."""
        rows = self.mutable.snapshot(end, first_doc=start, columns=[name])
        return encoded_logical_table(rows, pa.schema([self._logical.field(name)])).column(0).chunk(0)

    def bytes_kept(self) -> dict[str, int]:
        """What the sealed blocks keep beside the segment's buffers, per column (decoded multi-value columns)."""
        kept: dict[str, int] = {}
        for block in self._blocks:
            for name, size in block.bytes_kept().items():
                kept[name] = kept.get(name, 0) + size
        return kept

    def bytes_used(self) -> dict[str, int]:
        """What the segment uses per column: its buffers (``MutableSegment.bytes_used``) and what its blocks keep.
        The one measure of a consuming segment's memory: its ``memoryBytes`` and the consumer's memory-limit end
        check (``consuming_memory_bytes``) both read it."""
        used = self.mutable.bytes_used()
        for name, kept in self.bytes_kept().items():
            used[name] = used.get(name, 0) + kept
        return used

    def release(self) -> None:
        """The segment leaves: its blocks go (their DuckDB copies and tail tables are deleted once no query holds
        them)."""
        with self._lock:
            self._blocks = []
            self._open = {}
            self._follower = None
