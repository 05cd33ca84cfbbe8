"""Partial upsert merges: every strategy, nulls on either side, keys repeated in one batch."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cuvee.config.sections import PartialUpsertStrategy as S
from cuvee.upsert.partial import merge_rows, occurrence_rounds

SCHEMA = pa.schema([("id", pa.string()), ("v", pa.int64()), ("name", pa.string()), ("tags", pa.list_(pa.string())),
                    ("ts", pa.int64())])


def table(rows: list[tuple]) -> pa.Table:  # type: ignore[type-arg]
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)


def test_rounds_hold_each_key_once_in_batch_order() -> None:
    keys = np.array([5, 7, 5, 5, 9, 7], np.uint64)
    assert [r.tolist() for r in occurrence_rounds(keys)] == [[0, 1, 4], [2, 5], [3]]
    assert occurrence_rounds(np.array([], np.uint64)) == []


def test_each_strategy_and_nulls() -> None:
    previous = table([("a", 10, "old", ["x", "y"], 1), ("b", None, None, None, 1), ("c", 5, "keep", ["z"], 1)])
    new = table([("a", 3, None, ["y", "w"], 2), ("b", 4, "new", ["q"], 2), ("c", None, "fresh", None, 2)])
    has = np.array([True, True, False])  # c had no previous version: its new row stands as it is

    def merged(column: str, strategy: S) -> list:  # type: ignore[type-arg]
        out = merge_rows(previous, has, new, {column: strategy}, S.OVERWRITE, always_new=("id", "ts"))
        assert out.column("ts").to_pylist() == [2, 2, 2] and out.column("id").to_pylist() == ["a", "b", "c"]
        return out.column(column).to_pylist()

    assert merged("v", S.OVERWRITE) == [3, 4, None]
    assert merged("name", S.OVERWRITE) == ["old", "new", "fresh"]  # a null new value keeps the previous one
    assert merged("name", S.FORCE_OVERWRITE) == [None, "new", "fresh"]
    assert merged("name", S.IGNORE) == ["old", "new", "fresh"]
    assert merged("v", S.INCREMENT) == [13, 4, None]
    assert merged("v", S.MAX) == [10, 4, None] and merged("v", S.MIN) == [3, 4, None]
    assert merged("tags", S.APPEND) == [["x", "y", "y", "w"], ["q"], None]
    assert merged("tags", S.UNION) == [["w", "x", "y"], ["q"], None]  # sorted, as Pinot's TreeSet


def test_increment_wraps_like_java() -> None:
    previous, new = table([("a", 2**63 - 1, None, None, 1)]), table([("a", 1, None, None, 2)])
    out = merge_rows(previous, np.array([True]), new, {"v": S.INCREMENT}, S.OVERWRITE, always_new=("id", "ts"))
    assert out.column("v").to_pylist() == [-(2**63)]
