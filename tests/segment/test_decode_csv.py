"""CSV messages (Pinot's CSVMessageDecoder): a configured header or one per message, every column type from text,
multi-value splitting, nulls, presets, and bad messages counted with their offsets."""

from __future__ import annotations

from typing import Any

import pytest

from cuvee.config.decoder_config import PINOT_CSV
from tests.segment.decoder_helpers import SCHEMA, as_rows, decoder_of, expected, row

HEADER = "i,b,s,raw,doc,tags,nums,l,f,d,ts"


def config(**props: str) -> dict[str, str]:
    return {"stream.kafka.decoder.class.name": PINOT_CSV, **{f"stream.kafka.decoder.prop.{k}": v for k, v in props.items()}}


def line(n: int, delimiter: str = ",") -> bytes:
    r = row(n)
    doc = '"' + f'{{""k"":""v{n}"",""n"":{n}}}' + '"'  # JSON text in a quoted field
    values = [str(r["i"]), str(r["b"]).lower(), r["s"], r["raw"].hex(), doc, ";".join(r["tags"]),
              ";".join(map(str, r["nums"])), str(r["l"]), str(r["f"]), str(r["d"]), str(r["ts"])]
    return delimiter.join(values).encode()


def test_every_column_type_with_a_configured_header() -> None:
    result = decoder_of(config(header=HEADER)).decode([line(n) for n in range(3)], [4, 5, 6])
    assert result.bad == [] and result.offsets.tolist() == [4, 5, 6]
    assert as_rows(result.batch) == [expected(n) for n in range(3)]


def test_each_message_with_its_own_header_line() -> None:
    """Pinot's behaviour without the header prop."""
    result = decoder_of(config()).decode([HEADER.encode() + b"\n" + line(1), b"s,i\nhello,5"], [0, 1])
    assert result.bad == []
    rows = as_rows(result.batch)
    assert rows[0] == expected(1)
    assert (rows[1]["s"], rows[1]["i"], rows[1]["l"]) == ("hello", 5, None)


def test_skip_header_and_a_tab_preset() -> None:
    decoder = decoder_of(config(header=HEADER.replace(",", "\t"), skipHeader="true", fileFormat="TDF"))
    result = decoder.decode([b"whatever\tit\tsays\n" + line(2, "\t")], [0])
    assert result.bad == [] and as_rows(result.batch) == [expected(2)]


def test_empty_values_and_the_null_string_are_null() -> None:
    decoder = decoder_of(config(header="i,s,tags,l", nullStringValue="NA", multiValueDelimiter="|"))
    result = decoder.decode([b"1,,a||b,NA", b'2,"",,3'], [0, 1])
    assert result.bad == []
    rows = as_rows(result.batch)
    assert [(r["i"], r["s"], r["tags"], r["l"]) for r in rows] == [(1, None, ["a", "b"], None), (2, None, None, 3)]


def test_a_quoted_value_may_hold_the_delimiter_and_a_line_break() -> None:
    result = decoder_of(config(header="i,s")).decode([b'1,"a,b\nc"'], [0])
    assert result.bad == [] and result.batch.column("s").to_pylist() == ["a,b\nc"]


@pytest.mark.parametrize(("raw", "reason"), [
    (b"1,a\n2,b", "holds 2 records; a message is one record"),
    (b"1,a,3,4,5,6,7,8,9,10,11,12", "12 values but the header names 11 columns"),
    (b"\xff\xfe", "not UTF-8 text"),
    (b'1,"unterminated', "not CSV: unexpected end of data"),
    (b"x,true", "column 'i': 'x' is not a number (INT)"),
    (b"", "empty message"),
])
def test_bad_messages_are_counted_with_their_offsets(raw: bytes, reason: str) -> None:
    result = decoder_of(config(header=HEADER)).decode([line(1), raw, line(2)], [10, 11, 12])
    assert result.offsets.tolist() == [10, 12]
    assert [(b.offset, b.reason) for b in result.bad] == [(11, reason)]


def test_comment_lines_are_skipped() -> None:
    result = decoder_of(config(header="i,s", commentMarker="#")).decode([b"# a comment\n7,x"], [0])
    assert result.bad == [] and result.batch.column("i").to_pylist() == [7]


def test_a_message_without_a_header_when_none_is_configured_has_no_record() -> None:
    result = decoder_of(config()).decode([b"i,s"], [3])
    assert [(b.offset, b.reason) for b in result.bad] == [(3, "holds 0 records; a message is one record")]


def _columns(batch: Any) -> list[str]:
    return batch.schema.names


def test_columns_follow_the_schema_not_the_header() -> None:
    result = decoder_of(config(header="zzz,i")).decode([b"ignored,4"], [0])
    assert _columns(result.batch) == SCHEMA.column_names and result.batch.column("i").to_pylist() == [4]


def test_a_field_longer_than_pythons_csv_limit_is_read() -> None:
    """Python's csv module refuses fields over 128 KiB ("field larger than field limit"); Pinot's has no limit."""
    long_text = "x" * 1_000_000
    result = decoder_of(config(header=HEADER)).decode([line(1).replace(b",s1,", f',"{long_text}",'.encode())], [0])
    assert result.bad == []
    assert as_rows(result.batch)[0]["s"] == long_text
