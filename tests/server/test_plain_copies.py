"""The plain copies committed segments keep for queries stay under the server's byte budget: least recently read
out first, a copy bigger than the budget not kept (its column scanned encoded), a segment's copies gone with it."""

from __future__ import annotations

import gc
from pathlib import Path

import pyarrow as pa

from cuvee.server.plain_copies import PlainCopies
from cuvee.server.queryable import CommittedSegment
from tests.broker.helpers import committed, event_rows, segment_name


class _Owner:
    """What copies belong to: any object a weak reference can follow (a CommittedSegment on a server)."""


def test_the_least_recently_read_copy_makes_room_and_one_too_big_is_not_kept() -> None:
    copies = PlainCopies(max_bytes=3 * 800)
    owner = _Owner()
    token = copies.owner(owner)
    columns = {name: pa.array(range(100), pa.int64()) for name in "abcd"}  # 800 bytes each
    for name in "abc":
        assert copies.put(token, name, columns[name])
    assert copies.get(token, "a") is not None  # read: now the most recent
    assert copies.put(token, "d", columns["d"])  # b, the least recently read, goes
    assert copies.get(token, "b") is None and copies.get(token, "a") is not None and copies.bytes == 2400
    assert not copies.put(token, "e", pa.array(range(400), pa.int64()))  # 3200 bytes: over the whole budget
    assert copies.bytes == 2400
    del owner
    gc.collect()
    assert copies.bytes == 0 and copies.get(token, "a") is None  # the owner's copies left with it


def test_a_segment_scans_a_column_encoded_when_its_copy_cannot_be_kept(tmp_path: Path) -> None:
    rows = event_rows(400, 0, 7)
    built = committed(tmp_path, segment_name(0, 0), rows).segment
    none_kept = CommittedSegment(built, PlainCopies(max_bytes=0))  # a server with plain_copy_bytes = 0
    shown = none_kept.with_plain(none_kept.query_table().select(["id"]))
    assert pa.types.is_dictionary(shown.schema.field("id").type)
    assert shown.column("id").to_pylist() == rows.column("id").to_pylist()
