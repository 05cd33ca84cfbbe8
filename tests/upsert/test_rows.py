"""Decoded rows to key-map input: the first non-null comparison column, timestamps in milliseconds, delete flags."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa

from cuvee.config.schema import DataType
from cuvee.upsert.hashing import KeyColumn, KeyHasher
from cuvee.upsert.keymap import INT_SMALLEST
from cuvee.upsert.rows import versions_of


def test_versions_of_a_batch() -> None:
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    rows = pa.table({
        "user": ["a", "b", "a", "c"],
        "updated": pa.array([None, 5, None, None], pa.int64()),
        "ts": pa.array([at, at, None, at], pa.timestamp("ms", tz="UTC")),
        "deleted": pa.array([False, None, True, False]),
    })
    user = KeyHasher([KeyColumn("user", DataType.STRING, "null")])
    v = versions_of(rows, user, ["updated", "ts"], "deleted", first_doc=10)
    millis = int(at.timestamp() * 1000)
    assert v.comparisons.dtype == np.int64  # integer and time columns compare exactly
    assert v.comparisons.tolist() == [millis, 5, INT_SMALLEST, millis]  # first non-null column; none: smallest
    assert v.docs.tolist() == [10, 11, 12, 13]
    assert v.deletes is not None and v.deletes.tolist() == [False, False, True, False]
    ids = v.keys.group_ids().tolist()
    assert v.keys.index.tolist() == user.keys(rows).index.tolist() and ids[0] == ids[2] and len(set(ids)) == 3
    assert versions_of(rows, user, ["updated"], None, 0).deletes is None
    big = pa.table({"user": ["a", "a"], "v": pa.array([2**53 + 1, 2**53], pa.int64())})
    assert versions_of(big, user, ["v"], None, 0).comparisons.tolist() == [2**53 + 1, 2**53]  # no rounding
    floats = pa.table({"user": ["a", "b"], "score": [0.5, None]})
    assert versions_of(floats, user, ["score"], None, 0).comparisons.tolist() == [0.5, -np.inf]
