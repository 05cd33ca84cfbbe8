"""Partial upsert: a row merged with its key's previous version, column by column, at ingest. Pure.

The stored row is complete (queries read one row per key, as for full upsert), and since every replica merges the
same rows in the same offset order, replicas store the same bytes (same CRC). Strategies, as Pinot defines them
(``upsertConfig.partialUpsertStrategies``, else ``defaultPartialUpsertStrategy``):

- ``OVERWRITE``: the new value, or the previous one when the new value is null;
- ``FORCE_OVERWRITE``: the new value, null included;
- ``IGNORE``: the previous value, or the new one when there was none;
- ``INCREMENT``: previous + new; ``MAX`` / ``MIN``: the larger / smaller (a null side counts as absent);
- ``APPEND``: previous list then new list; ``UNION``: the distinct values of both, sorted (Pinot's TreeSet).

Primary-key and comparison columns always take the new value. A key seen several times in one batch is merged in
*rounds* (``occurrence_rounds``): each round holds at most one row per key and merges against the rows before it,
so a batch costs one vectorised merge per repeat of its most repeated key, not one per row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config.sections import PartialUpsertStrategy as S


def occurrence_rounds(keys: np.ndarray) -> list[np.ndarray]:
    """Row indices split into rounds: round k holds each key's k-th row in batch order (ascending indices)."""
    n = len(keys)
    if n == 0:
        return []
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    occurrence = np.empty(n, np.int64)
    occurrence[order] = np.arange(n) - group_start
    return [np.flatnonzero(occurrence == k) for k in range(int(occurrence.max()) + 1)]


def merge_rows(previous: pa.Table, has_previous: np.ndarray, new: pa.Table,
               strategies: Mapping[str, S], default: S, always_new: Sequence[str]) -> pa.Table:
    """``new`` merged with ``previous`` (aligned row by row). ``has_previous`` must be false where the key has no
    live version: never stored, deleted (a tombstone), and for rows that are themselves out of order (Pinot merges
    none of these). Both tables have the same columns and types."""
    columns = []
    mask = pa.array(has_previous)
    for name in new.column_names:
        fresh = new.column(name).combine_chunks()
        if name in always_new or not has_previous.any():
            columns.append(fresh)
            continue
        old = previous.column(name).combine_chunks()
        old = pc.if_else(mask, old, pa.nulls(len(old), old.type))  # no previous version: absent
        columns.append(_merge(strategies.get(name, default), old, fresh))
    return pa.Table.from_arrays(columns, schema=new.schema)


def _merge(strategy: S, old: pa.Array, new: pa.Array) -> pa.Array:
    if strategy is S.FORCE_OVERWRITE:
        return new
    if strategy is S.OVERWRITE:
        return pc.coalesce(new, old)
    if strategy is S.IGNORE:
        return pc.coalesce(old, new)
    if strategy is S.INCREMENT:
        total = pc.add(old.cast(new.type), new)  # wraps on overflow, as Java's + does in Pinot
        return pc.coalesce(total, new, old)
    if strategy in (S.MAX, S.MIN):
        pick = pc.max_element_wise if strategy is S.MAX else pc.min_element_wise
        return pick(old, new, skip_nulls=True)
    if strategy in (S.APPEND, S.UNION):
        return _lists(old, new, unique=strategy is S.UNION)
    raise ValueError(f"unknown partial upsert strategy {strategy}")


def _lists(old: pa.Array, new: pa.Array, *, unique: bool) -> pa.Array:
    """Row-wise list concatenation (previous first), optionally without repeats. Per row, but only for rows that
    have both sides; a missing side is the other side."""
    out = pc.coalesce(new, old).to_pylist()
    both = np.flatnonzero(np.asarray(old.is_valid()) & np.asarray(new.is_valid()))
    if len(both):
        olds, news = old.take(pa.array(both)).to_pylist(), new.take(pa.array(both)).to_pylist()
        for row, a, b in zip(both, olds, news):
            joined = list(a) + list(b)
            out[row] = sorted({v for v in joined if v is not None}) if unique else joined
    return pa.array(out, type=new.type)
