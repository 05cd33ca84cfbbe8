"""Property: random rows of every data type, single- and multi-value -> JSON -> decode -> append -> snapshot."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from cuvee.config.table import IndexingConfig
from cuvee.decode import JsonDecoder
from cuvee.segment.mutable import MutableSegment
from tests.segment.test_decode_properties import encode, expected_batch, schemas, typed_rows


@st.composite
def indexing_for(draw: st.DrawFn, names: list[str]) -> IndexingConfig:
    layout = {name: draw(st.sampled_from(["dictionary", "raw", "inverted"])) for name in names}
    return IndexingConfig(
        inverted_index_columns=tuple(n for n, kind in layout.items() if kind == "inverted"),
        no_dictionary_columns=tuple(n for n, kind in layout.items() if kind == "raw"),
    )


def scan(column: pa.ChunkedArray, value: Any) -> BitMap:
    """Docs holding exactly ``value`` (compared by repr: -0.0 and 0.0 are different dictionary entries)."""
    docs = BitMap()
    for doc, cell in enumerate(column.to_pylist()):
        cells = cell if isinstance(cell, list) else [cell]
        if cell is not None and repr(value) in map(repr, cells):
            docs.add(doc)
    return docs


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_decode_append_snapshot_round_trip(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    rows = data.draw(typed_rows(schema)) + data.draw(typed_rows(schema))
    indexing = data.draw(indexing_for(schema.column_names))
    capacity = data.draw(st.integers(1, len(rows) + 3))
    decoded = JsonDecoder(schema).decode(encode(schema, rows, stringly=data.draw(st.booleans())), range(len(rows)))
    assert decoded.bad == []

    segment = MutableSegment(schema, indexing, capacity)
    position = 0
    while position < decoded.batch.num_rows and not segment.is_full:
        size = data.draw(st.integers(1, 5))
        chunk = decoded.batch.slice(position, size)
        taken = segment.append(chunk, decoded.offsets[position : position + chunk.num_rows])
        assert taken == min(chunk.num_rows, capacity - position)
        position += taken
    kept = min(capacity, len(rows))
    assert segment.num_docs == kept
    assert (segment.start_offset, segment.end_offset) == (0, kept)

    snapshot = segment.snapshot()
    assert snapshot.cast(schema.arrow_schema()).equals(pa.Table.from_batches([expected_batch(schema, rows[:kept])]))
    for name in indexing.inverted_index_columns:
        plain = snapshot.column(name).cast(schema.column(name).arrow_type())
        for value in segment.dictionary(name).to_pylist()[:5]:
            if isinstance(value, float) and np.isnan(value):
                continue
            assert segment.inverted_index(name, value) == scan(plain, value)
