"""Committed segments, and consuming segments' sealed blocks, copied into DuckDB's own storage, for the queries that
scan many rows.

DuckDB scans its own tables faster than Arrow ones: a filter runs on its vectors with zone maps instead of being
handed to pyarrow's compute kernels, nothing crosses the Python layer, and in a database file its columns are
compressed (dictionaries, FSST), so a string function or a LIKE runs once per distinct value instead of once per
row. So a server may keep, beside its committed segments, a copy of their rows in DuckDB database files, and a
query over many rows scans the copies (and the Arrow views of the segments not copied yet, in the same
``UNION ALL``). A consuming segment's sealed blocks (``cuvee.server.consuming.blocks.SealedBlock``: rows that never
change) are copied the same way, each like a segment of its own however few its rows; a query scans a consuming
segment's copied blocks here, and its open block's rows (``OpenBlock``) from a *tail table*.

- **Tail tables**: each table's database has an in-memory database attached (``TAILS``) holding, per open block
  of a consuming segment, a table of its rows with their row numbers (``DOC_COLUMN``). The first query that reads
  the block makes it (in its own thread: it needs the rows now); then the worker appends each batch the consume
  loop publishes (``follow``: one insert per batch however many queries), one append at a time. A query reads
  ``WHERE DOC_COLUMN < <its row count>`` (or below the rows appended so far, the rest as Arrow, when the worker is
  appending them right then: it does not wait), so it sees exactly the rows published when it started even after
  later rows were appended. Its rows count against ``native_copy_bytes`` at what they take in memory
  (``tail_bytes``: uncompressed, and a block per column however few its rows — far more than a copy's decoded
  bytes; a tail that would not fit is not made or not appended to: its rows are read as Arrow); it is
  dropped once no query reads it, when its block's copy is ready or its segment leaves (the ``OpenBlock``
  collected), and with its database. Only while the table has a database (a copy exists): a segment's first
  rows, before any copy, are scanned as Arrow.

- **Bounded**: ``native_copy_bytes`` (ServerConfig, 4 GiB by default) bounds the copies by their rows' decoded
  Arrow bytes (on disk DuckDB compresses them, ~10x smaller on ClickBench's rows, though incompressible columns —
  random doubles — take about their decoded size, and a table's file also holds its write-ahead log and, while a
  compaction runs, both versions; DuckDB's buffer pool caches in memory what queries read, within DuckDB's memory
  share of the machine, ``cuvee.query.execute``); 0 keeps none. A copy is made only while the disk has its
  decoded bytes free.
- **A failed database is given up**: DuckDB invalidates a database whose write failed (a full disk); its copies
  then leave at once (queries scan the segments; the one that met the failure answers with the error), its
  segments are declined for ``min_idle_seconds``, and its file is deleted once no query reads it.
- **Files in the server's data directory** (``.native-copies``, emptied when the server starts: a copy does not
  outlive the process that made it — its segment's token does not either), one database file per table, deleted
  when the table's last copy goes.
- **One table per table**: all copied segments of a table are rows of one DuckDB table, each tagged with its
  segment's id (``SEGMENT_COLUMN``); a query reads ``WHERE SEGMENT_COLUMN IN (…)`` its segments (zone maps make
  that free: a segment's rows are contiguous). One table, not one per segment: a ``UNION ALL`` of eight 125k-row
  tables cost ~2 ms more per scan than one table of the same rows, more than DuckDB's whole scan of 1M rows.
- **One database per table**: each table's copies live in a DuckDB database of their own (file and network
  access disabled and locked, as the shared query databases), and a query runs there on a private cursor: the
  SQL a query brings can read, at worst, other segments of the table it was allowed to read, never another table.
- **Built in the background**, by one thread that makes every change (copies, deletes, compactions): a query's
  query that scans at least ``min_rows`` rows (``QueryExecutor``) asks for copies of the segments it reads, however
  few rows each holds, and never waits for them. The bound is the query's, not a segment's: a realtime table's
  segments end at any size (a ClickBench table of 1M rows streamed into 3 partitions commits ~90k-row segments),
  and a 100k-row floor per segment left every one of them scanned as Arrow.
- **Room** is made as for plain copies (``cuvee.server.plain_copies``): only from copies idle for
  ``min_idle_seconds``, least recently read first; a segment finding none is declined for that long. A copy
  that leaves (evicted, or its segment gone) is deleted from its table; deleted rows count against the budget
  until the table is compacted (rewritten without them), which happens before a copy needs their room.
- **Same answers**: a segment is copied only when DuckDB reads the copy back with exactly the Arrow types it
  reads the segment's rows with, and the table's columns; others are scanned as Arrow.
- **Never under a query**: a copy a running query reads is deleted once that query ends; a compacted table's old
  version is dropped once its last reader ends; a database is closed (the server stopping, or given up) once no
  query reads it — DuckDB closed under a running statement crashed the process.
"""

from __future__ import annotations

import logging
import queue
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from cuvee.query import duckdb_functions
from cuvee.query.execute import SMALL_INPUT_ROWS, memory_limit, register

log = logging.getLogger(__name__)

DEFAULT_NATIVE_COPY_BYTES = 4 << 30  # a server's default (ServerConfig.native_copy_bytes): 4 GiB of decoded rows
SEGMENT_COLUMN = "__cuvee_segment"
_SOURCE = "cuvee_native_source"
TAILS = "cuvee_tails"  # the in-memory database attached to each table's database: consuming segments' tail tables
DOC_COLUMN = "__cuvee_doc"  # a tail table's row numbers in its segment: a query reads those below its count
_TAIL_SOURCE = "cuvee_tail_source"


NATIVE_COPIES_DIR = ".native-copies"  # in a server's data directory (a dot: not taken for a table's directory)


def copy_bytes(rows: pa.Table) -> int:
    """What a copy of ``rows`` is counted as against ``native_copy_bytes``: their decoded Arrow bytes (DuckDB's
    file holds them compressed, mostly smaller)."""
    return rows.nbytes


_ROW_GROUP_ROWS = 122_880  # DuckDB's rows per row group: each begins a block of its own per column
_TAIL_BLOCK_BYTES = 320 << 10  # what a tail column holds per row group at most beyond its values (measured ≤ 290 KiB)


def tail_bytes(rows: pa.Table, held: int) -> int:
    """What appending ``rows`` to a tail table holding ``held`` rows is counted as against ``native_copy_bytes``:
    what DuckDB's in-memory database really takes, not the decoded bytes a copy is counted at. In memory nothing
    is compressed and each column (each nested child too, and ``DOC_COLUMN``) of each row group takes a 256 KiB
    block once a second append lands in it, whatever its rows (measured: 6 rows of 20 columns took 7.7 MiB, 900
    times their decoded bytes), and its values up to twice their decoded bytes (strings, lists). So: twice the
    decoded bytes, and a block per column for each row group the append begins."""
    groups = -(-(held + rows.num_rows) // _ROW_GROUP_ROWS) - -(-held // _ROW_GROUP_ROWS)
    columns = 1 + sum(_vectors(field.type) for field in rows.schema)
    return 2 * rows.nbytes + groups * columns * _TAIL_BLOCK_BYTES


def _vectors(kind: pa.DataType) -> int:
    """The vectors DuckDB stores a column of ``kind`` in: one, and its children's (a list's values, a struct's
    fields)."""
    return 1 + sum(_vectors(kind.field(index).type) for index in range(kind.num_fields))


@dataclass
class _Copy:
    table: str
    owner: _Table  # the database holding its rows: a table given up and made again is another one
    token: int  # the value of SEGMENT_COLUMN on its rows
    bytes: int  # counted against the budget (0 once released: its database was given up)
    last_read: float
    readers: int = 0
    dropping: bool = False  # left (evicted, or its segment gone): deleted when its last reader ends


@dataclass
class _Version:
    name: str  # the DuckDB table
    readers: int = 0
    retired: bool = False  # a compaction replaced it: dropped when its last reader ends


@dataclass
class _Tail:
    """An ``OpenBlock``'s rows in a DuckDB table of the ``TAILS`` database (beside its table's copies)."""

    owner: _Table  # the database holding it
    token: int  # its OpenBlock's
    name: str  # its table's, in TAILS (made by the first append)
    appended: int  # its rows are the block's from its start up to this one
    made: bool = False
    following: int = 0  # rows published up to here, to append in the background (``follow``); 0: none queued
    bytes: int = 0  # counted against the budget (``tail_bytes``: what DuckDB's memory holds, not decoded bytes)
    readers: int = 0
    dropping: bool = False  # its block's copy is ready, its segment gone, or it failed: dropped once unread
    lock: threading.Lock = field(default_factory=threading.Lock)  # one append at a time


@dataclass
class _Table:
    name: str  # the Cuvee table whose copies it holds
    con: duckdb.DuckDBPyConnection
    path: Path  # its database file
    readers: int = 0  # queries holding a cursor on its database: it is never closed under them
    lost: bool = False  # taken out of use (failed for good, or the copies closed): closed once unread
    schema: pa.Schema | None = None  # the copied rows' columns as DuckDB reads them (without SEGMENT_COLUMN)
    version: _Version | None = None
    copies: int = 0  # live copies and copies being made
    dead_bytes: int = 0  # deleted copies' rows, held until a compaction


@dataclass
class NativeRead:
    """What one query reads: its cursor on the table's database, the table holding the copies, and the segment
    tokens whose copies it holds."""

    cursor: duckdb.DuckDBPyConnection
    relation: str
    tokens: set[int]
    lose: Callable[[], None]  # the query found the database failed for good (``NativeCopies.lose``)
    # (an OpenBlock, the query's row count) -> (the relation holding the block's rows, the row up to which the
    # query reads them there: those whose DOC_COLUMN is below it; the rest of the block's rows below the count as
    # Arrow), held until the read ends; None: read them all as Arrow
    tail: Callable[[Any, int], tuple[str, int] | None] = lambda block, count: None


class NativeCopies:
    """The copies of one server's committed segments and sealed blocks. Thread-safe; ``close`` drops them all."""

    def __init__(self, max_bytes: int = 0, min_idle_seconds: float = 60.0,
                 min_rows: int = SMALL_INPUT_ROWS, clock: Callable[[], float] = time.monotonic,
                 background: bool = True, directory: Path | None = None, threads: int = 0):
        """``directory`` holds the database files (emptied now: files left by an earlier process are stale); None
        uses a temporary directory of its own, removed by ``close``. ``background`` False makes every change in
        the caller (tests; ``drain`` runs what is queued)."""
        if max_bytes < 0:
            raise ValueError("native_copy_bytes must be 0 (none kept) or positive")
        self.max_bytes = max_bytes
        self._threads = threads  # DuckDB threads of each table's database (0: every core)
        self._directory = directory
        self._own_directory = directory is None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
        self._lost: list[_Table] = []  # out of use, closed by the worker once no query reads them
        self.min_idle_seconds = min_idle_seconds
        self.min_rows = min_rows
        self.bytes = 0  # live copies, copies being made, deleted rows not compacted yet, tail tables
        self._clock = clock
        self._background = background
        self._lock = threading.Lock()
        self._copies: OrderedDict[int, _Copy] = OrderedDict()  # token -> copy, least recently read first
        self._declined: dict[int, float] = {}
        self._never: set[int] = set()  # tokens whose rows cannot be copied alike
        self._pending: set[int] = set()  # asked for, not made yet
        self._gone: set[int] = set()  # pending tokens whose segment left
        self._tables: dict[str, _Table] = {}
        self._tails: dict[int, _Tail] = {}  # by their OpenBlock's token
        self._owners: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._tokens = 0
        self._versions = 0
        self._queue: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def building(self) -> int:
        """Copies asked for and not made (or declined) yet."""
        with self._lock:
            return len(self._pending)

    def summary(self) -> tuple[dict[str, tuple[int, int]], int, int]:
        """({table: (copies ready, their bytes)}, the bytes counted against the budget (deleted rows and tail
        tables too), copies being made): what the server's metrics show."""
        with self._lock:
            tables: dict[str, tuple[int, int]] = {}
            for copy in self._copies.values():
                if not copy.dropping:
                    count, size = tables.get(copy.table, (0, 0))
                    tables[copy.table] = (count + 1, size + copy.bytes)
            return tables, self.bytes, len(self._pending)

    def token(self, segment: Any) -> int:
        """``segment``'s token (a ``CommittedSegment`` or a consuming segment's ``SealedBlock``: one copy per
        object), its copy deleted when the object is collected (a block's: when its segment commits or is
        released)."""
        with self._lock:
            token = self._owners.get(segment)
            if token is not None:
                return token
            self._tokens += 1
            token = self._owners[segment] = self._tokens
        weakref.finalize(segment, self._queue.put, ("forget", token))  # no lock in a finalizer: the worker does it
        return token

    def want(self, token: int, table: str, segment: Any) -> None:
        """Copy ``segment`` (an ``ImmutableSegment``: ``total_docs``, ``to_arrow(decode=True)``; or a consuming
        segment's sealed block) of ``table`` unless it is copied, being copied, declined lately, or cannot be copied
        alike. Whether a query is large enough to read copies (``min_rows``) is the caller's call."""
        if not self.enabled:
            return
        with self._lock:
            if self._closed or token in self._copies or token in self._pending or token in self._never:
                return
            declined = self._declined.get(token)
            if declined is not None and self._clock() - declined < self.min_idle_seconds:
                return
            self._pending.add(token)
        self._submit(("copy", (token, table, weakref.ref(segment))))

    def ready(self, token: int) -> bool:
        with self._lock:
            copy = self._copies.get(token)
            return copy is not None and not copy.dropping

    @contextmanager
    def reading(self, table: str, tokens: Sequence[int], expired: Callable[[], bool] = lambda: False,
                tails: bool = False) -> Iterator[NativeRead | None]:
        """The copies of ``tokens`` that are ready, held until the block ends (None when there are none — unless
        ``tails``: the query reads a consuming segment, whose open block's tail table the table's database holds
        if it exists, even when no copy of the query's is ready).
        ``expired``: whether the query's deadline passed, asked before a tail append the query makes itself (its
        rows' conversion is Python, which DuckDB's interrupt does not stop)."""
        held: list[_Copy] = []
        read_tails: list[_Tail] = []
        version: _Version | None = None
        cursor = None
        with self._lock:
            copies = self._tables.get(table)
            if copies is not None and copies.version is not None and not self._closed:
                now = self._clock()
                for token in tokens:
                    copy = self._copies.get(token)
                    if copy is None or copy.dropping or copy.table != table:
                        continue
                    copy.readers += 1
                    copy.last_read = now
                    self._copies.move_to_end(token)
                    held.append(copy)
                if held or tails:
                    version = copies.version
                    version.readers += 1
                    copies.readers += 1
                    cursor = copies.con.cursor()
        try:
            if cursor is not None and version is not None and copies is not None:
                on = (copies, cursor)
                yield NativeRead(cursor, version.name, {c.token for c in held}, lambda: self.lose(on[0]),
                                 lambda block, count: self._tail(on[0], on[1], read_tails, block, count, expired))
            else:
                yield None
        finally:
            if cursor is not None:
                _close_cursor(cursor)
            with self._lock:
                for copy in held:
                    copy.readers -= 1
                gone = [copy for copy in held if copy.dropping and copy.readers == 0]
                for tail in read_tails:
                    tail.readers -= 1
                unread_tails = [tail for tail in read_tails if tail.dropping and tail.readers == 0]
                retired = empty = unread = False
                if version is not None and copies is not None:
                    version.readers -= 1
                    copies.readers -= 1
                    retired = version.retired and version.readers == 0 and not copies.lost
                    empty = self._tables.get(table) is copies and copies.copies == 0
                    unread = copies.lost and copies.readers == 0
                stopped = self._closed and (self._thread is None or not self._thread.is_alive())
            if unread and stopped:
                self._reap()  # the copies are closed and their worker gone: the last reader closes the database
                return
            if unread:
                self._submit(("reap", None))
            for copy in gone:
                self._submit(("delete", copy))
            for tail in unread_tails:
                self._submit(("drop_tail", tail))
            if retired and version is not None:
                self._submit(("drop", (table, version)))
            if empty:
                self._submit(("close", table))

    def drain(self) -> None:
        """Run what is queued, in the caller (``background`` False)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self._do(item)

    def close(self, wait_seconds: float = 30.0) -> None:
        """Stop making copies and drop them all (the server stops). The worker ends its change first (up to
        ``wait_seconds``), and a database a query still reads is closed by that query's end: DuckDB's connection
        closed under a running statement crashed the process."""
        with self._lock:
            self._closed = True
            self._copies.clear()
            self._tails.clear()  # in the databases closed below
            for copies in self._tables.values():
                copies.lost = True
                self._lost.append(copies)
            self._tables.clear()
            self.bytes = 0
            thread = self._thread
        self._queue.put(None)
        if thread is not None:
            thread.join(wait_seconds)
            if thread.is_alive():  # its change goes on: a database it may use is left open (the process ends)
                log.warning("native copies: the worker did not stop within %.0f s; their databases stay open",
                            wait_seconds)
                return
        self._reap()
        if self._own_directory and self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)

    def lose(self, copies: _Table) -> None:
        """``copies``' database failed for good (DuckDB invalidates a database whose write failed, e.g. on a full
        disk): its copies leave now, queries read the Arrow views, its segments are declined for
        ``min_idle_seconds``, and the database is closed and deleted once no query reads it."""
        with self._lock:
            if self._tables.get(copies.name) is not copies:
                return  # given up already (or the copies closed)
            log.error("native copies of %s: their DuckDB database failed; queries scan the segments instead",
                      copies.name)
            del self._tables[copies.name]
            now = self._clock()
            for token, copy in list(self._copies.items()):
                if copy.owner is copies:
                    del self._copies[token]
                    copy.dropping = True
                    self._declined[token] = now
                    self.bytes -= copy.bytes
                    copy.bytes = 0  # released: its late delete (a reader's) has nothing more to give back
            self.bytes -= copies.dead_bytes
            copies.dead_bytes = 0
            self._release_tails(copies)
            copies.lost = True
            self._lost.append(copies)

    def _reap(self) -> None:
        """Close (and delete) the lost databases no query reads any more — the worker, or the last reader once the
        worker has stopped."""
        with self._lock:
            unread = [copies for copies in self._lost if copies.readers == 0]
            self._lost = [copies for copies in self._lost if copies.readers > 0]
        for copies in unread:
            _close(copies)

    # ---- consuming segments' tails: appended by the queries that read them ------------------------------------

    def _tail(self, copies: _Table, cursor: duckdb.DuckDBPyConnection, held: list[_Tail], block: Any,
              count: int, expired: Callable[[], bool] = lambda: False) -> tuple[str, int] | None:
        """(the relation holding ``block``'s rows (an ``OpenBlock``: ``start``, ``end``, ``rows(start, end)``) in
        ``copies``' database, the row up to which the query reads them there), held by the read (``held``) until
        it ends. Up to ``count`` (the block's end at most), the table made or appended now if need be — unless the
        worker is appending those rows already (``follow``): then up to the rows appended so far, the query reading
        the rest as Arrow rather than waiting. None when the block's rows are read as Arrow: its table failed, or
        would not fit the budget, or the table's copies are not read alike. Raises ``duckdb.InterruptException``
        (the query's timeout) when ``expired`` says its deadline passed while the rows were converted."""
        token = self.token(block)
        end = min(count, block.end)
        with self._lock:
            if self._closed or self._tables.get(copies.name) is not copies or copies.schema is None:
                return None
            tail = self._tails.get(token)
            if tail is None:
                self._versions += 1
                tail = self._tails[token] = _Tail(copies, token, f"tail_{self._versions}", block.start)
            if tail.owner is not copies or tail.dropping:
                return None  # made in a database given up since (its segment's next blocks get new ones), or failed
            if tail not in held:
                tail.readers += 1
                held.append(tail)
        relation = f'{TAILS}."{tail.name}"'
        appended = tail.appended  # rows committed to the table (set after each append commits)
        if appended >= end:
            return relation, end
        if tail.made and tail.following >= end or not tail.lock.acquire(blocking=False):
            return (relation, appended) if tail.made else None  # the worker (or a query) is appending them now
        try:
            if tail.appended < end and not self._append(copies, cursor, tail, block, end, expired=expired):
                return None
        finally:
            tail.lock.release()
        return relation, end

    def follow(self, block: Any, count: int) -> None:
        """``block``'s rows (an ``OpenBlock``) up to ``count`` are published: if a query made its tail table, the
        worker appends them, so the next query finds them there instead of appending them itself. Any thread (the
        consume thread, after each batch): it only enqueues, once per tail until the worker takes it."""
        with self._lock:
            token = self._owners.get(block)
            tail = None if token is None else self._tails.get(token)
            if tail is None or tail.dropping or not tail.made or self._closed:
                return
            wanted = min(count, block.end)
            if wanted <= max(tail.appended, tail.following):
                return
            queued, tail.following = tail.following > 0, wanted
        if not queued:
            self._submit(("follow", (tail, weakref.ref(block))))

    def _follow(self, tail: _Tail, ref: weakref.ref[Any]) -> None:
        """The worker appends the rows ``follow`` asked for (the rows a query would otherwise append)."""
        with self._lock:
            wanted, tail.following = tail.following, 0
            current = self._tables.get(tail.owner.name) is tail.owner and not self._closed and not tail.dropping
        block = ref()
        if block is None or not current:
            return
        with tail.lock:
            if tail.appended < wanted and not tail.dropping:
                cursor = None
                try:
                    cursor = tail.owner.con.cursor()
                    self._append(tail.owner, cursor, tail, block, wanted)
                except duckdb.Error:
                    log.debug("a tail table could not be appended in the background; a query appends its rows")
                finally:
                    if cursor is not None:
                        _close_cursor(cursor)
        with self._lock:
            unread = tail.dropping and tail.readers == 0
        if unread:  # it failed: nothing else would drop it
            self._drop_tail(tail)

    def _append(self, copies: _Table, cursor: duckdb.DuckDBPyConnection, tail: _Tail, block: Any, end: int,
                expired: Callable[[], bool] = lambda: False) -> bool:
        """Under ``tail.lock``: append ``block``'s rows from ``tail.appended`` to ``end`` (the first time: make the
        table). A failure (or no room in the budget) has the tail dropped: its block's rows are read as Arrow. A
        query whose deadline passed (``expired``) while its rows were converted appends nothing: it times out (an
        interrupt DuckDB got while idle is lost), the tail kept for the next query."""
        rows = block.rows(tail.appended, end)
        if expired():
            raise duckdb.InterruptException("the query's deadline passed before its rows were appended")
        size = tail_bytes(rows, tail.appended - block.start)
        with self._lock:
            fits = not tail.dropping and self.bytes + size <= self.max_bytes
            if fits:
                self.bytes += size
                tail.bytes += size
            else:
                tail.dropping = True
        if not fits:
            return False
        relation = f'{TAILS}."{tail.name}"'
        done = interrupted = False
        try:
            if DOC_COLUMN in rows.schema.names or SEGMENT_COLUMN in rows.schema.names:
                return False
            register(cursor, _TAIL_SOURCE, rows.append_column(
                DOC_COLUMN, pa.array(np.arange(tail.appended, end, dtype=np.int64))))
            if not tail.made:
                schema = cursor.sql(f"SELECT * EXCLUDE ({DOC_COLUMN}) FROM {_TAIL_SOURCE} LIMIT 0").to_arrow_table()
                if schema.schema != copies.schema:
                    return False  # not read alike: the block's rows stay Arrow
                cursor.execute(f"CREATE TABLE {relation} AS SELECT * FROM {_TAIL_SOURCE}")
                tail.made = True
            else:
                cursor.execute(f"INSERT INTO {relation} SELECT * FROM {_TAIL_SOURCE}")
            tail.appended = end
            done = True
            return True
        except duckdb.InterruptException:  # the query's deadline: nothing appended, the tail stays for the next
            interrupted = True
            raise
        except duckdb.Error as exc:
            if isinstance(exc, (duckdb.FatalException, duckdb.InternalException)):  # the database invalidated
                self.lose(copies)
            else:
                log.exception("cannot append a consuming segment's rows to its DuckDB tail; they are read as Arrow")
            return False
        finally:
            try:
                cursor.unregister(_TAIL_SOURCE)
            except duckdb.Error:
                log.debug("a tail's source could not be unregistered (its database failed)")
            if not done:
                with self._lock:
                    tail.dropping = tail.dropping or not interrupted
                    if self._tables.get(copies.name) is copies and not self._closed:
                        self.bytes -= size  # the failed append's reservation (a lost database released them)
                        tail.bytes -= size

    def _drop_tail(self, tail: _Tail) -> None:
        """Drop a tail table no query reads (the worker, or ``_forget``)."""
        with self._lock:
            current = self._tables.get(tail.owner.name) is tail.owner and not self._closed
            if current:
                self.bytes -= tail.bytes
            tail.bytes = 0
            made, tail.made = tail.made, False
        if current and made:
            self._statement(tail.owner, f'DROP TABLE IF EXISTS {TAILS}."{tail.name}"')

    def _release_tails(self, copies: _Table) -> None:
        """Under the lock: ``copies``' database goes (given up or closed), and its tail tables with it."""
        for token, tail in list(self._tails.items()):
            if tail.owner is copies:
                del self._tails[token]
                tail.dropping = True
                self.bytes -= tail.bytes
                tail.bytes = 0
                tail.made = False

    # ---- the worker: every change ---------------------------------------------------------------------------

    def _submit(self, item: tuple[str, Any]) -> None:
        self._queue.put(item)
        if not self._background:
            self.drain()
            return
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="native-copies", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._do(item)
            except Exception:  # noqa: BLE001 - copies are an optimisation: a failure must not stop the others
                log.exception("native copies: %s failed", item[0])

    def _do(self, item: tuple[str, Any]) -> None:
        try:
            self._change(item)
        finally:
            self._reap()  # a database lost during the change is closed here, never under the change itself

    def _change(self, item: tuple[str, Any]) -> None:
        kind, arg = item
        if kind == "copy":
            token, table, ref = arg
            try:
                segment = ref()
                if segment is not None:
                    self._copy(token, table, segment)
                del segment
            finally:
                with self._lock:
                    self._pending.discard(token)
                    self._gone.discard(token)
        elif kind == "forget":
            self._forget(arg)
        elif kind == "delete":
            self._delete(arg)
        elif kind == "drop":
            table, version = arg
            self._drop_version(table, version)
        elif kind == "close":
            self._close_if_empty(arg)
        elif kind == "drop_tail":
            self._drop_tail(arg)
        elif kind == "follow":
            self._follow(*arg)
        # "reap": nothing more than what _do does after every change

    def _copy(self, token: int, table: str, segment: Any) -> None:
        rows = segment.to_arrow(decode=True)
        size = copy_bytes(rows)
        with self._lock:
            self._declined.pop(token, None)  # tried now: a decline from before must not hide this attempt's outcome
            fresh = not self._closed and table not in self._tables and size <= self.max_bytes
        # a new database file is made outside the lock (queries take it); only this worker adds tables, so a table
        # missing now is missing below (close() and lose() only take tables away)
        try:
            if not self._disk_room(size):
                raise OSError(f"less free disk than the copy's {size} decoded bytes")
            database = self._new_table(table) if fresh else None
        except (OSError, duckdb.Error) as exc:  # no room, an unwritable directory, no file handles left, …
            log.warning("native copies: cannot make a copy of a segment of %s (%s); it is scanned as Arrow", table,
                        exc)
            with self._lock:
                self._declined[token] = self._clock()  # tried again after min_idle_seconds, not on every query
            return
        try:
            with self._lock:
                if self._closed or token in self._gone:
                    return
                if size > self.max_bytes:
                    self._never.add(token)
                    return
                copies = self._tables.get(table) or database
                if copies is None:
                    return  # the table's database was given up meanwhile (lose): asked for again by a later query
                victims = self._make_room(size)
                if victims is None:
                    self._declined[token] = self._clock()
                    return
                if copies is database:
                    self._tables[table] = copies
                    database = None
                copies.copies += 1
                self.bytes += size  # reserved while it is made
        finally:
            if database is not None:  # made for a copy that was not made after all
                _close(database)
        for victim in victims:
            self._delete(victim)
        made = False
        try:
            if not self._compact_for():
                with self._lock:
                    self._declined[token] = self._clock()  # no room after all: as if none was found
                return
            made = self._insert(copies, token, rows)
            if made:  # rows appended short of a whole row group stay uncompressed until a checkpoint (a filter
                # compares their strings one by one, not per dictionary entry), and a consuming segment's blocks
                # or a segment's last row group may never fill DuckDB's own threshold (16 MB of log); a failed
                self._statement(copies, "CHECKPOINT")  # checkpoint leaves the copy as it is
        finally:
            with self._lock:
                current = self._tables.get(table) is copies  # not lost (nor closed) while it was made
                if made and current and token not in self._gone:
                    self._copies[token] = _Copy(table, copies, token, size, self._clock())
                    return
                if not made and token not in self._declined:
                    self._never.add(token)
                if not self._closed:
                    self.bytes -= size  # the reservation
                    copies.copies -= 1
                    if made and current:  # its segment left while it was made: its rows are dead already
                        copies.dead_bytes += size
                        self.bytes += size
            if made and current:
                self._delete_rows(copies, token)
            self._close_if_empty(table)

    def _insert(self, copies: _Table, token: int, rows: pa.Table) -> bool:
        """Add ``rows`` as segment ``token``'s copy; False when DuckDB would not read them back alike (never copied)
        or the write failed (declined for ``min_idle_seconds``)."""
        cursor = None
        try:
            cursor = copies.con.cursor()
            register(cursor, _SOURCE, rows)
            schema = cursor.sql(f"SELECT * FROM {_SOURCE} LIMIT 0").to_arrow_table().schema
            if SEGMENT_COLUMN in schema.names:
                return False
            if copies.version is None:
                name = self._version_name()
                cursor.execute(f'CREATE TABLE "{name}" AS SELECT *, CAST({int(token)} AS BIGINT) AS '
                               f"{SEGMENT_COLUMN} FROM {_SOURCE}")
                back = cursor.sql(f'SELECT * EXCLUDE ({SEGMENT_COLUMN}) FROM "{name}" LIMIT 0').to_arrow_table()
                if back.schema != schema:
                    cursor.execute(f'DROP TABLE "{name}"')
                    return False
                with self._lock:
                    copies.schema = schema
                    copies.version = _Version(name)
                return True
            if schema != copies.schema:
                return False  # other columns than the table's copies (a column added since): scanned as Arrow
            cursor.execute(f'INSERT INTO "{copies.version.name}" SELECT *, CAST({int(token)} AS BIGINT) '
                           f"FROM {_SOURCE}")
            return True
        except duckdb.Error as exc:  # a failed write (a full disk: Fatal when DuckDB gave the database up)
            if isinstance(exc, (duckdb.FatalException, duckdb.InternalException)):  # the database invalidated
                self.lose(copies)
            else:
                log.exception("cannot copy a segment into DuckDB; queries scan its Arrow view")
            with self._lock:
                self._declined[token] = self._clock()  # tried again after min_idle_seconds, not never
            return False
        finally:
            if cursor is not None:
                _close_cursor(cursor)

    def _disk_room(self, size: int) -> bool:
        """Whether the copies' disk has ``size`` bytes free (a copy's decoded bytes: more than its file takes,
        mostly): DuckDB invalidates a database whose write fails, so a full disk is avoided rather than met."""
        directory = self._directory
        while directory is not None and not directory.exists():
            directory = directory.parent if directory.parent != directory else None
        if directory is None:
            return True  # a temporary directory of its own, made with the first table
        return shutil.disk_usage(directory).free >= size

    def _new_table(self, table: str) -> _Table | None:
        """A new database file for ``table``'s copies (named by a uuid: table names come from outside, and another
        NativeCopies misconfigured onto the same directory never makes the same name); None once the copies are
        closed."""
        with self._lock:
            if self._closed:
                return None
            if self._directory is None:
                self._directory = Path(tempfile.mkdtemp(prefix="cuvee-native-copies-"))
            path = self._directory / f"copies-{uuid.uuid4().hex}.duckdb"
        path.parent.mkdir(parents=True, exist_ok=True)
        return _Table(table, _new_database(path, self._threads), path)

    def _version_name(self) -> str:
        """A name no table version of this server had before: a late drop of an old version (a reader's) can
        never hit a newer table, even in a database made again for the same table."""
        with self._lock:
            self._versions += 1
            return f"copies_{self._versions}"

    def _make_room(self, size: int) -> list[_Copy] | None:
        """Under the lock: the idle copies to delete so that ``size`` more bytes fit once deleted rows are
        compacted away, or None when they cannot."""
        now = self._clock()
        free = self.max_bytes - self.bytes + sum(t.dead_bytes for t in self._tables.values())
        chosen: list[int] = []
        for token, copy in self._copies.items():
            if free >= size:
                break
            if now - copy.last_read < self.min_idle_seconds:
                break  # the least recently read was read lately: so was every other
            if copy.readers == 0 and not copy.dropping:
                chosen.append(token)
                free += copy.bytes
        if free < size:
            return None
        victims = [self._copies.pop(token) for token in chosen]
        for victim in victims:
            victim.dropping = True
        return victims

    def _forget(self, token: int) -> None:
        """The segment object is gone: its copy leaves (now, or when its last reader ends); an OpenBlock's tail
        table likewise."""
        with self._lock:
            tail = self._tails.pop(token, None)
            if tail is not None:
                tail.dropping = True
            unread = tail is not None and tail.readers == 0  # else its last reader has it dropped
        if unread:
            assert tail is not None
            self._drop_tail(tail)
        with self._lock:
            self._declined.pop(token, None)
            self._never.discard(token)
            if token in self._pending:
                self._gone.add(token)  # being made: _copy lets it go
            copy = self._copies.pop(token, None)
            if copy is None:
                return
            copy.dropping = True
            if copy.readers:
                return  # the last reader has it deleted
        self._delete(copy)

    def _delete(self, copy: _Copy) -> None:
        """Delete a copy's rows (they hold memory until a compaction) — the worker only."""
        with self._lock:
            copies = copy.owner
            if self._tables.get(copy.table) is not copies:  # its database was given up (or the copies closed):
                if not self._closed:  # nothing to delete there, and never a newer database's rows of the segment
                    self.bytes -= copy.bytes
                    copy.bytes = 0
                return
            copies.copies -= 1
            copies.dead_bytes += copy.bytes
        self._delete_rows(copies, copy.token)
        self._close_if_empty(copy.table)

    def _delete_rows(self, copies: _Table, token: int) -> None:
        version = copies.version
        if version is not None:
            self._statement(copies, f'DELETE FROM "{version.name}" WHERE {SEGMENT_COLUMN} = {int(token)}')
            self._statement(copies, "CHECKPOINT")  # frees wholly deleted row groups' blocks (none is read)

    def _compact_for(self) -> bool:
        """Rewrite tables holding deleted rows until the copy being made (reserved) fits, most deleted bytes
        first; False when a rewrite failed (the copy is not made: a loop retrying it would stop the worker)."""
        while True:
            with self._lock:
                if self.bytes <= self.max_bytes:  # the new copy's bytes are reserved already
                    return True
                dead = [(t.dead_bytes, name) for name, t in self._tables.items() if t.dead_bytes > 0]
            if not dead or not self._compact(max(dead)[1]):
                return not dead

    def _compact(self, table: str) -> bool:
        """``table``'s copies rewritten without their deleted rows, as a new version new queries read."""
        name = self._version_name()
        with self._lock:
            copies = self._tables.get(table)
            if copies is None or copies.version is None:
                return False
            old, dead = copies.version, copies.dead_bytes
        if not self._statement(copies, f'CREATE TABLE "{name}" AS SELECT * FROM "{old.name}"'):
            return False
        with self._lock:
            if self._tables.get(table) is not copies:  # given up meanwhile: its bytes were released then
                return True
            copies.version = _Version(name)
            copies.dead_bytes -= dead
            self.bytes -= dead
            old.retired = True
            unread = old.readers == 0
        if unread:
            self._drop_version(table, old)
        return True

    def _drop_version(self, table: str, version: _Version) -> None:
        with self._lock:
            copies = self._tables.get(table)
        if copies is not None:
            self._statement(copies, f'DROP TABLE IF EXISTS "{version.name}"')
            self._statement(copies, "CHECKPOINT")  # its blocks back to the file's free list

    def _statement(self, copies: _Table, sql: str) -> bool:
        """Run one change on ``copies``' database; a failure is logged (the copies are an optimisation) and False,
        and one that invalidated the database (``duckdb.FatalException``) has it given up (``lose``)."""
        cursor = None
        try:
            cursor = copies.con.cursor()
            cursor.execute(sql)
            return True
        except (duckdb.FatalException, duckdb.InternalException):  # the database invalidated
            self.lose(copies)
            return False
        except duckdb.Error:
            log.exception("native copies: %s failed", sql.split(" (", 1)[0][:80])
            return False
        finally:
            if cursor is not None:
                _close_cursor(cursor)

    def _close_if_empty(self, table: str) -> None:
        """A table with no copy left gives its database (and the deleted rows' memory) back."""
        with self._lock:
            copies = self._tables.get(table)
            if copies is None or copies.copies > 0 or (copies.version is not None and copies.version.readers):
                return
            del self._tables[table]
            self.bytes -= copies.dead_bytes
            self._release_tails(copies)  # no read holds the database: none holds its tails
        _close(copies)


def _close(copies: _Table) -> None:
    """Close a table's database and delete its files; one already closed (the server stopping) is nothing to
    report."""
    try:
        copies.con.close()
    except duckdb.Error:
        log.debug("a DuckDB database of native copies was closed already")
    for leftover in (copies.path, copies.path.with_name(copies.path.name + ".wal")):
        leftover.unlink(missing_ok=True)
    shutil.rmtree(copies.path.with_name(copies.path.name + ".tmp"), ignore_errors=True)  # DuckDB's spill files


def _close_cursor(cursor: duckdb.DuckDBPyConnection) -> None:
    """Close a cursor; one on a database already closed or given up is nothing to report."""
    try:
        cursor.close()
    except duckdb.Error:
        log.debug("a cursor on a lost database of native copies was closed already")


def _new_database(path: Path, threads: int = 0) -> duckdb.DuckDBPyConnection:
    config: dict[str, str | bool | int] = {"enable_external_access": False}
    if threads:
        config["threads"] = threads
    limit = memory_limit()
    if limit is not None:
        config["memory_limit"] = limit
    database = duckdb.connect(str(path), config=config)
    try:
        duckdb_functions.register(database)
        database.execute(f"ATTACH ':memory:' AS {TAILS}")  # consuming segments' tails, in memory only
        database.execute("SET lock_configuration = true")
    except BaseException:
        database.close()
        raise
    return database
