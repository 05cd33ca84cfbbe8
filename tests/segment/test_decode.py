"""JsonDecoder: coercion rules, bad records (offset + reason), mixed batches, the bad-record log."""

from __future__ import annotations

import datetime as dt
import json
import math
import threading
from typing import Any

import orjson
import pyarrow as pa
import pytest

from cuvee.config.schema import Schema
from cuvee.decode import BadRecordLog, JsonDecoder
from cuvee.decode.base import RAW_PREFIX_BYTES, BadRecord


def one_column(data_type: str, single_value: bool = True) -> Schema:
    return Schema.from_json(
        {"schemaName": "t", "dimensionFieldSpecs": [
            {"name": "c", "dataType": data_type, "singleValueField": single_value}]}
    )


EVENT = Schema.from_json(
    {
        "schemaName": "event",
        "dimensionFieldSpecs": [
            {"name": "country", "dataType": "STRING"},
            {"name": "tags", "dataType": "STRING", "singleValueField": False},
        ],
        "metricFieldSpecs": [{"name": "clicks", "dataType": "INT"}, {"name": "revenue", "dataType": "DOUBLE"}],
        "dateTimeFieldSpecs": [
            {"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
        ],
    }
)


def event(i: int) -> bytes:
    return orjson.dumps({"country": f"c{i % 7}", "tags": [f"t{i % 3}"], "clicks": i, "revenue": i / 2,
                         "ts": 1_700_000_000_000 + i})


def decode_value(data_type: str, value: Any, single_value: bool = True) -> list[Any]:
    result = JsonDecoder(one_column(data_type, single_value)).decode([orjson.dumps({"c": value})], [7])
    assert result.bad == [], result.bad
    assert result.offsets.tolist() == [7]
    return result.batch.column(0).to_pylist()


@pytest.mark.parametrize(
    ("data_type", "value", "expected"),
    [
        ("INT", 12, 12),
        ("INT", "12", 12),
        ("INT", " -7 ", -7),
        ("INT", "12.0", 12),
        ("INT", 12.0, 12),
        ("INT", True, 1),
        ("INT", -(2**31), -(2**31)),
        ("LONG", 12.0, 12),
        ("LONG", "9223372036854775807", 2**63 - 1),
        ("LONG", 1e18, 10**18),
        ("FLOAT", "1.5", 1.5),
        ("FLOAT", 2, 2.0),
        ("DOUBLE", 3, 3.0),
        ("DOUBLE", "-2.5e3", -2500.0),
        ("DOUBLE", "-Infinity", -math.inf),
        ("DOUBLE", False, 0.0),
        ("BOOLEAN", True, True),
        ("BOOLEAN", 1, True),
        ("BOOLEAN", 0, False),
        ("BOOLEAN", "true", True),
        ("BOOLEAN", "FALSE", False),
        ("BOOLEAN", "1", True),
        ("TIMESTAMP", 1_700_000_000_123, dt.datetime(2023, 11, 14, 22, 13, 20, 123000)),
        ("TIMESTAMP", "1700000000123", dt.datetime(2023, 11, 14, 22, 13, 20, 123000)),
        ("TIMESTAMP", 1_700_000_000_123.0, dt.datetime(2023, 11, 14, 22, 13, 20, 123000)),
        ("TIMESTAMP", "2024-01-01T00:00:00Z", dt.datetime(2024, 1, 1)),
        ("TIMESTAMP", "2024-01-01T02:00:00+02:00", dt.datetime(2024, 1, 1)),
        ("TIMESTAMP", "2024-01-01 00:00:00.250", dt.datetime(2024, 1, 1, 0, 0, 0, 250000)),
        ("STRING", "x", "x"),
        ("STRING", 12, "12"),
        ("STRING", 1.5, "1.5"),
        ("STRING", True, "true"),
        ("STRING", {"a": 1}, '{"a":1}'),
        ("STRING", [1, "b"], '[1,"b"]'),
        ("JSON", {"a": [1, 2]}, '{"a":[1,2]}'),
        ("JSON", "plain", "plain"),
        ("JSON", 3, "3"),
        ("BYTES", "00fF10", b"\x00\xff\x10"),
        ("BYTES", "", b""),
    ],
)
def test_single_value_coercion(data_type: str, value: Any, expected: Any) -> None:
    assert decode_value(data_type, value) == [expected]


@pytest.mark.parametrize(
    ("data_type", "value", "expected"),
    [
        ("INT", 5, [5]),
        ("INT", [1, None, "2", 3.0], [1, 2, 3]),
        ("INT", [], []),
        ("STRING", "a", ["a"]),
        ("STRING", ["a", 1, {"k": "v"}], ["a", "1", '{"k":"v"}']),
        ("BOOLEAN", ["true", 0], [True, False]),
        ("BYTES", ["ab", "cd"], [b"\xab", b"\xcd"]),
        ("TIMESTAMP", ["2024-01-01", 0], [dt.datetime(2024, 1, 1), dt.datetime(1970, 1, 1)]),
    ],
)
def test_multi_value_coercion(data_type: str, value: Any, expected: Any) -> None:
    assert decode_value(data_type, value, single_value=False) == [expected]


def test_nan_string_is_a_double() -> None:
    [value] = decode_value("DOUBLE", "NaN")
    assert math.isnan(value)


def test_float_rounding_is_the_same_on_both_paths() -> None:
    # Rounded straight to float32 this token gives 1.0000001; through a double (the fallback) it gives 1.0.
    token = b"1.0000000596046447753906250000000001"
    decoder = JsonDecoder(one_column("FLOAT"))
    fast = decoder.decode_fast([b'{"c": ' + token + b"}"])
    slow = decoder.decode([b'{"c": ' + token + b"}", b'{"c": "' + token + b'"}'], [0, 1])
    assert fast is not None
    assert fast.column(0).to_pylist() == [1.0]
    assert slow.batch.column(0).to_pylist() == [1.0, 1.0]


def test_float_overflow_becomes_infinity_like_arrow() -> None:
    assert decode_value("FLOAT", "1e39") == [math.inf]
    assert decode_value("FLOAT", 1e39) == [math.inf]


@pytest.mark.parametrize(
    ("data_type", "value", "reason"),
    [
        ("INT", 3_000_000_000, "3000000000 is out of range for INT"),
        ("INT", -(2**31) - 1, "out of range for INT"),
        ("INT", "2147483648", "out of range for INT"),
        ("LONG", 2**63, "out of range for LONG"),
        ("LONG", 1e19, "out of range for LONG"),
        ("INT", 12.5, "12.5 is not a whole number (INT)"),
        ("INT", "abc", "'abc' is not a number (INT)"),
        ("INT", "1_000", "is not a number (INT)"),
        ("INT", {"a": 1}, "expected a single INT value, got an object"),
        ("INT", [1, 2], "expected a single INT value, got a list"),
        ("DOUBLE", "abc", "is not a number (DOUBLE)"),
        ("BOOLEAN", 2, "is not a boolean"),
        ("BOOLEAN", "yes", "is not a boolean"),
        ("TIMESTAMP", "yesterday", "neither epoch millis nor an ISO-8601 timestamp"),
        ("TIMESTAMP", True, "is not a timestamp"),
        ("TIMESTAMP", 2.5, "not a whole number (TIMESTAMP)"),
        ("BYTES", "xyz", "is not a hex string (BYTES)"),
        ("BYTES", "de ad", "is not a hex string (BYTES)"),
        ("BYTES", 12, "is not a hex string (BYTES)"),
    ],
)
def test_uncoercible_values_are_bad_records(data_type: str, value: Any, reason: str) -> None:
    good = {"c": None}
    messages = [orjson.dumps(good), orjson.dumps({"c": value}), orjson.dumps(good)]
    result = JsonDecoder(one_column(data_type)).decode(messages, [10, 11, 12])
    assert result.offsets.tolist() == [10, 12]
    assert result.batch.num_rows == 2
    [bad] = result.bad
    assert bad.offset == 11
    assert bad.reason.startswith("column 'c': ")
    assert reason in bad.reason
    assert bad.raw_prefix == messages[1].decode()


def test_multi_value_nested_list_is_a_bad_record() -> None:
    result = JsonDecoder(one_column("INT", single_value=False)).decode([b'{"c": [[1]]}'], [3])
    assert result.batch.num_rows == 0
    assert [(b.offset, b.reason) for b in result.bad] == [(3, "column 'c': expected a single INT value, got a list")]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"nope", "malformed JSON"),
        (b'{"c": 1', "malformed JSON"),
        (b'{"c": 1} {"c": 2}', "malformed JSON"),
        (b'{"c": "\xff"}', "malformed JSON"),
        (b'{"c": NaN}', "malformed JSON"),
        (b"", "empty message"),
        (b"   ", "empty message"),
        (None, "empty message"),
        (b"[1, 2]", "not a JSON object (got a list)"),
        (b"null", "not a JSON object (got null)"),
        (b'"text"', "not a JSON object (got a string)"),
        (b"42", "not a JSON object (got a number)"),
    ],
)
def test_undecodable_messages_are_bad_records(raw: bytes | None, reason: str) -> None:
    messages = [b'{"c": 1}', raw, b'{"c": 2}']
    result = JsonDecoder(one_column("INT")).decode(messages, [5, 6, 7])  # type: ignore[list-item]
    assert result.batch.column(0).to_pylist() == [1, 2]
    assert result.offsets.tolist() == [5, 7]
    [bad] = result.bad
    assert bad.offset == 6
    assert bad.reason.startswith(reason)


def test_missing_fields_and_nulls_become_nulls_and_extra_fields_are_ignored() -> None:
    messages = [b'{"country": null, "extra": {"deep": [1]}}', b'{"clicks": 3, "tags": null}', b"{}"]
    result = JsonDecoder(EVENT).decode(messages, [0, 1, 2])
    assert result.bad == []
    rows = result.batch.to_pylist()
    assert rows[0] == {"country": None, "tags": None, "clicks": None, "revenue": None, "ts": None}
    assert rows[1]["clicks"] == 3 and rows[1]["tags"] is None
    assert result.batch.schema == EVENT.arrow_schema()


def test_good_rows_of_a_large_mixed_batch_are_kept_in_order() -> None:
    messages = [event(i) for i in range(1000)]
    poison = {17: b"{oops", 500: b'{"clicks": "many"}', 501: b'{"clicks": 1e12}', 999: b"[]"}
    for position, raw in poison.items():
        messages[position] = raw
    offsets = list(range(5000, 6000))
    result = JsonDecoder(EVENT).decode(messages, offsets)
    kept = [i for i in range(1000) if i not in poison]
    assert result.offsets.tolist() == [5000 + i for i in kept]
    assert result.batch.column("clicks").to_pylist() == kept
    assert result.batch.column("tags").to_pylist() == [[f"t{i % 3}"] for i in kept]
    assert [b.offset for b in result.bad] == [5000 + i for i in poison]
    assert "malformed JSON" in result.bad[0].reason
    assert "'many' is not a number (INT)" in result.bad[1].reason
    assert "out of range for INT" in result.bad[2].reason
    assert "not a JSON object" in result.bad[3].reason


def test_a_poison_message_sends_only_its_chunk_down_the_slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = JsonDecoder(EVENT, retry_chunks=10)
    slow_messages = []
    original = decoder.decode_each

    def counting(messages: list[bytes], offsets: Any) -> Any:
        slow_messages.extend(messages)
        return original(messages, offsets)

    monkeypatch.setattr(decoder, "decode_each", counting)
    messages = [event(i) for i in range(1000)]
    messages[345] = b"{broken"
    result = decoder.decode(messages, range(1000))
    assert result.batch.num_rows == 999
    assert len(slow_messages) == 100


def test_well_typed_batches_take_the_fast_path() -> None:
    decoder = JsonDecoder(EVENT)
    assert decoder.decode_fast([event(i) for i in range(50)]) is not None
    iso = [orjson.dumps({"ts": f"2024-01-0{1 + i % 9}T00:00:00Z"}) for i in range(20)]
    fast = decoder.decode_fast(iso)
    assert fast is not None
    assert fast.column("ts").to_pylist()[0] == dt.datetime(2024, 1, 1)
    assert decoder.decode_fast([b'{"clicks": "1"}']) is None


def test_messages_spanning_lines_and_duplicate_keys_use_the_fallback() -> None:
    pretty = json.dumps({"clicks": 4, "country": "x"}, indent=2).encode()
    result = JsonDecoder(EVENT).decode([pretty, b'{"clicks": 1, "clicks": 2}', b'{"clicks": 5}\r'], [0, 1, 2])
    assert result.bad == []
    assert result.batch.column("clicks").to_pylist() == [4, 2, 5]


def test_other_bytes_like_messages_are_accepted() -> None:
    messages = [bytearray(b'{"clicks": 1}'), memoryview(b'{"clicks": 2}'), b'{"clicks": 3}']
    result = JsonDecoder(EVENT).decode(messages, [0, 1, 2])  # type: ignore[arg-type]
    assert result.bad == []
    assert result.batch.column("clicks").to_pylist() == [1, 2, 3]


def test_blank_message_next_to_two_objects_on_one_line_does_not_shift_rows() -> None:
    result = JsonDecoder(one_column("INT")).decode([b'{"c": 1} {"c": 2}', b""], [0, 1])
    assert result.batch.num_rows == 0
    assert [b.offset for b in result.bad] == [0, 1]


def test_empty_input_gives_an_empty_batch_of_the_schema() -> None:
    result = JsonDecoder(EVENT).decode([], [])
    assert result.batch.num_rows == 0
    assert result.batch.schema == EVENT.arrow_schema()
    assert result.offsets.dtype.name == "int64" and len(result.offsets) == 0


def test_raw_prefix_is_bounded() -> None:
    raw = b"x" * (RAW_PREFIX_BYTES * 3)
    [bad] = JsonDecoder(EVENT).decode([raw], [9]).bad
    assert bad.raw_prefix == "x" * RAW_PREFIX_BYTES


def test_decoder_records_bad_messages_in_its_log(tmp_path: Any) -> None:
    log = BadRecordLog(keep_last=10, jsonl_path=tmp_path / "bad.jsonl")
    decoder = JsonDecoder(EVENT, log, source="events__0__0__20260101T0000Z")
    decoder.decode([event(1), b"{", b'{"clicks": 1.5}'], [100, 101, 102])
    assert log.total == 2
    assert [r.offset for r in log.recent()] == [101, 102]
    lines = [orjson.loads(line) for line in (tmp_path / "bad.jsonl").read_bytes().splitlines()]
    assert [(line["offset"], line["source"]) for line in lines] == [
        (101, "events__0__0__20260101T0000Z"),
        (102, "events__0__0__20260101T0000Z"),
    ]
    assert "not a whole number" in lines[1]["reason"]


def test_bad_record_log_is_bounded_but_counts_everything() -> None:
    log = BadRecordLog(keep_last=3)
    log.record(BadRecord(offset=i, reason="r", raw_prefix="") for i in range(5))
    assert log.total == 5
    assert [r.offset for r in log.recent()] == [2, 3, 4]


def test_bad_record_log_is_thread_safe() -> None:
    log = BadRecordLog(keep_last=50)

    def writer(base: int) -> None:
        for i in range(500):
            log.record([BadRecord(offset=base + i, reason="r", raw_prefix="")])

    threads = [threading.Thread(target=writer, args=(n * 1000,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert log.total == 4000
    assert len(log.recent()) == 50


def test_length_mismatch_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="2 messages but 1 offsets"):
        JsonDecoder(EVENT).decode([b"{}", b"{}"], [1])


def test_result_offsets_are_int64_numpy() -> None:
    result = JsonDecoder(EVENT).decode([event(1)], [2**40])
    assert result.offsets.dtype.name == "int64"
    assert result.offsets.tolist() == [2**40]
    assert isinstance(result.batch, pa.RecordBatch)
