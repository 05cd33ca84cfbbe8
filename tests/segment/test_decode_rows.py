"""RowBuilder (``cuvee.decode.rows``): converting a whole column in one Arrow call when the values' types are exact
gives the same column, and the same bad rows, as the coercion rules applied value by value."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvee.config.schema import DataType, FieldRole, FieldSpec, Schema
from cuvee.decode.coerce import CoercionError, column_coercer
from cuvee.decode.rows import RowBuilder

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.integers(-5, 5),
    st.floats(allow_nan=False, width=64), st.sampled_from(["1", "x", "true", "2024-01-02T03:04:05Z", "ff00", ""]),
    st.binary(max_size=4),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.sampled_from("ab"), st.integers(0, 3)))


def reference(spec: FieldSpec, values: list[Any]) -> tuple[list[Any], set[int]]:
    """The rules alone: each value through the column's coercer."""
    coerce = column_coercer(spec)
    out, bad = [], set()
    for row, value in enumerate(values):
        if value is None:
            out.append(None)
            continue
        try:
            out.append(coerce(value))
        except CoercionError:
            bad.add(row)
    return out, bad


@settings(max_examples=300, deadline=None)
@given(data_type=st.sampled_from(list(DataType)), single=st.booleans(),
       values=st.lists(st.one_of(VALUES, st.lists(st.integers(-3, 2**40), max_size=3)), min_size=1, max_size=6))
def test_one_arrow_call_or_value_by_value_give_the_same_column(data_type: DataType, single: bool,
                                                               values: list[Any]) -> None:
    spec = FieldSpec("c", data_type, FieldRole.DIMENSION, single_value=single)
    builder = RowBuilder(Schema("t", (spec,)))
    batch, kept, bad = builder.build([str(i).encode() for i in range(len(values))], np.arange(len(values)),
                                     lambda raw: {"c": values[int(raw)]}, empty_is_bad=False)
    expected, expected_bad = reference(spec, values)
    assert {b.offset for b in bad} == expected_bad
    assert kept.tolist() == [row for row in range(len(values)) if row not in expected_bad]
    assert batch.column(0).equals(pa.array(expected, type=spec.arrow_type()))


def test_the_first_failing_column_names_the_reason() -> None:
    schema = Schema("t", (FieldSpec("a", DataType.INT, FieldRole.DIMENSION),
                          FieldSpec("b", DataType.BOOLEAN, FieldRole.DIMENSION)))
    _, kept, bad = RowBuilder(schema).build([b"0", b"1"], np.array([5, 6]),
                                            lambda raw: [{"a": "x", "b": "y"}, {"a": 1, "b": True}][int(raw)])
    assert kept.tolist() == [1]
    assert [(b.offset, b.reason) for b in bad] == [(5, "column 'a': 'x' is not a number (INT)")]
