"""Reading one planned segment inside a Spark task, as Arrow batches in Spark's types.

A committed segment is read from its archive: the deep store first, a peer server holding it ONLINE when the
deep store fails or the segment has no download URI (deep-store bypass). The archive is unpacked into a private
temporary directory (the archive's own CRC is checked), its CRC must equal the one planned (else the segment was
replaced since the read was planned, and the task fails rather than mix versions), and its columns are mapped, not
copied; a column added to the schema after the segment was built is read as its default null value, as servers
serve it (``cuvee.evolution.serving``). A consuming segment is read through a server that holds it: the server query protocol with
``SELECT <columns> FROM cuvee_segments``, the half's time filter sent structured.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.auth.client import cluster_headers
from cuvee.config.schema import FieldSpec
from cuvee.deepstore import open_deepstore
from cuvee.errors import CuveeError
from cuvee.evolution.serving import with_defaults
from cuvee.pipeline.controller_client import PipelineError
from cuvee.pipeline.convert import to_spark
from cuvee.pipeline.predicates import Predicate, apply
from cuvee.pipeline.read_plan import SegmentSource
from cuvee.protocol.completion_http import SEGMENT_DOWNLOAD_PATH
from cuvee.protocol.query import SERVER_QUERY_PATH, ServerQueryRequest, TimeFilter, decode_response
from cuvee.query import SERVER_RELATION
from cuvee.segment.archive import unpack
from cuvee.segment.errors import SegmentError
from cuvee.segment.immutable import ImmutableSegment

BATCH_ROWS = 65_536


def scan(source: SegmentSource, fields: Sequence[FieldSpec], predicates: Sequence[Predicate], *,
         deep_store_uri: str, timeout_seconds: float, work_dir: str | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of ``source`` the half's time filter and ``predicates`` keep, columns ``fields``."""
    table = read_segment(source, fields, deep_store_uri=deep_store_uri, timeout_seconds=timeout_seconds,
                         work_dir=work_dir)
    # predicates name only the read's columns (the data source takes no other)
    yield from apply(to_spark(table, list(fields)), predicates).to_batches(max_chunksize=BATCH_ROWS)


def read_segment(source: SegmentSource, fields: Sequence[FieldSpec], *, deep_store_uri: str,
                 timeout_seconds: float, work_dir: str | None = None) -> pa.Table:
    """The rows of ``source`` the half's time filter keeps, in their stored types (maintenance jobs rebuild
    segments from them; ``scan`` converts them to Spark's)."""
    if source.consuming:
        return _query_server(source, fields, timeout_seconds)
    with tempfile.TemporaryDirectory(prefix="cuvee-read-", dir=work_dir) as tmp:
        segment = _fetch(source, Path(tmp), deep_store_uri, timeout_seconds)
        # the files stay mapped after the directory is removed (POSIX), so the rows outlive ``tmp``
        stored = set(segment.column_names)  # a column added to the schema since: its default (as servers serve it)
        names = list(dict.fromkeys([f.name for f in fields if f.name in stored] + _filter_columns(source.time_filter)))
        return with_defaults(_time_filtered(segment.to_arrow(names), source.time_filter), fields)


def _filter_columns(time_filter: TimeFilter | None) -> list[str]:
    return [time_filter.column] if time_filter is not None else []


def _time_filtered(table: pa.Table, time_filter: TimeFilter | None) -> pa.Table:
    """A hybrid half's rows: ``time <= b`` or ``time > b`` in stored units (TIMESTAMP in milliseconds); rows with
    no time belong to neither half (the servers' rule)."""
    if time_filter is None or table.num_rows == 0:
        return table
    column = table.column(time_filter.column)
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("ms")).cast(pa.int64())
    compare = pc.less_equal if time_filter.op == "<=" else pc.greater
    return table.filter(compare(column, pa.scalar(time_filter.value, pa.int64())), null_selection_behavior="drop")


def _fetch(source: SegmentSource, tmp: Path, deep_store_uri: str, timeout_seconds: float) -> ImmutableSegment:
    errors: list[str] = []
    if source.download_uri:
        try:
            deep = open_deepstore(deep_store_uri)
            archive = deep.get(deep.key_of(source.download_uri), tmp / "deep.archive")
            return _install(source, archive, tmp)
        except (CuveeError, OSError) as exc:
            errors.append(f"deep store {source.download_uri}: {exc}")
    for peer in source.peers:
        try:
            return _install(source, _from_peer(source, peer, tmp, timeout_seconds), tmp)
        except (httpx.HTTPError, CuveeError, OSError) as exc:
            errors.append(f"peer {peer}: {exc}")
    if not errors:
        errors.append("it has no download URI and no live server holds it")
    raise PipelineError(f"cannot read segment {source.segment} of {source.table}: {'; '.join(errors)}")


def _from_peer(source: SegmentSource, peer: str, tmp: Path, timeout_seconds: float) -> Path:
    url = peer + SEGMENT_DOWNLOAD_PATH.format(table=source.table, segment=source.segment)
    target = tmp / f"peer-{uuid.uuid4().hex}.archive"
    with httpx.stream("GET", url, timeout=timeout_seconds, headers=cluster_headers()) as response:
        if response.status_code != 200:
            raise PipelineError(f"GET {url} answered HTTP {response.status_code}")
        with open(target, "wb") as out:
            for chunk in response.iter_bytes(1 << 20):
                out.write(chunk)
    return target


def _install(source: SegmentSource, archive: Path, tmp: Path) -> ImmutableSegment:
    into = tmp / f"unpacked-{uuid.uuid4().hex}"
    try:
        path = unpack(archive, into)  # checks the archive's own CRC
        segment = ImmutableSegment.load(path)
    finally:
        archive.unlink(missing_ok=True)
    if segment.name != source.segment:
        shutil.rmtree(into, ignore_errors=True)
        raise SegmentError(f"the archive holds segment {segment.name}, not {source.segment}")
    if source.crc is not None and segment.crc != source.crc:
        shutil.rmtree(into, ignore_errors=True)
        raise SegmentError(f"the copy has CRC {segment.crc}, the planned one {source.crc}: the segment was "
                           f"replaced after the read was planned; run the read again")
    return segment


def _query_server(source: SegmentSource, fields: Sequence[FieldSpec], timeout_seconds: float) -> pa.Table:
    columns = ", ".join('"' + f.name.replace('"', '""') + '"' for f in fields)
    request = ServerQueryRequest(request_id=f"spark-{uuid.uuid4().hex[:12]}", table=source.table,
                                 sql=f"SELECT {columns} FROM {SERVER_RELATION}", segments=(source.segment,),
                                 timeout_ms=max(1, int(timeout_seconds * 1000)), time_filter=source.time_filter,
                                 null_handling=True)  # a consuming segment's rows as committed ones read: NULLs
    errors: list[str] = []
    for peer in source.peers:
        try:
            response = httpx.post(peer + SERVER_QUERY_PATH, content=request.encode(), timeout=timeout_seconds,
                                  headers={"content-type": "application/json", **cluster_headers()})
            if response.status_code != 200:
                errors.append(f"{peer} answered HTTP {response.status_code}")
                continue
            table, stats = decode_response(response.content)
            if stats.missingSegments or stats.exceptions or table is None:
                errors.append(f"{peer}: {stats.exceptions or 'does not hold it'}")
                continue
            return table
        except (httpx.HTTPError, CuveeError) as exc:
            errors.append(f"{peer}: {exc}")
    raise PipelineError(f"cannot read consuming segment {source.segment} of {source.table}: "
                        f"{'; '.join(errors) or 'no live server holds it'}")
