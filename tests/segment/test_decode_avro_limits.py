"""The limits on what one Avro message may cost (``cuvee.config.avro_limits``): no message takes the process down
(a recursive schema's messages nested deeper than MAX_AVRO_DEPTH are bad records; a crash is tested in a child
process, as it would kill the test run), and no message builds more than ``value_bound`` values (schemas that
could are refused, wherever their names point)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from typing import Any

import fastavro
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuvee.config.avro_limits import (
    MAX_AVRO_DEPTH,
    MAX_AVRO_ITEM_VALUES,
    MAX_AVRO_RECORD_VALUES,
    AvroSchemaRefused,
    value_bound,
)
from cuvee.config.decoder_config import avro_schema_problem
from cuvee.config.schema import Schema
from cuvee.decode.avro import nesting_problem, read_record, reader_schema
from cuvee.decode.rows import MessageError

NODE = {"type": "record", "name": "Node", "namespace": "lists", "fields": [
    {"name": "id", "type": "int"}, {"name": "next", "type": ["null", "Node"]}]}


def zigzag(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def linked_list(nodes: int) -> bytes:
    """A message of NODE nesting ``nodes`` records (ids 1): each node is id 1, then branch 1 (a Node) or 0."""
    return b"\x02\x02" * (nodes - 1) + b"\x02\x00"


def chain(levels: int, leaf: Any, prefix: str = "R") -> Any:
    """``levels`` records nested in one another around ``leaf``."""
    node = leaf
    for level in range(levels):
        node = {"type": "record", "name": f"{prefix}{level}", "fields": [{"name": "f", "type": node}]}
    return node


def top(field_type: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": "Top", **extra, "fields": [{"name": "a", "type": field_type}]}


# ---- 1. no message takes the process down -------------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import sys, threading
    import orjson
    from cuvee.config.avro_limits import MAX_AVRO_DEPTH
    from cuvee.config.decoder_config import PINOT_AVRO, PINOT_AVRO_REGISTRY, parse_decoder
    from cuvee.config.schema import Schema
    from cuvee.decode.factory import build_decoder
    from cuvee.testing.schema_registry import SchemaRegistryServer

    NODE = orjson.loads(sys.argv[1])
    COLUMNS = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [
        {"name": "id", "dataType": "INT"}, {"name": "next", "dataType": "JSON"}]})

    def decoder(props):
        spec = parse_decoder({f"stream.kafka.decoder.{k}": v for k, v in props.items()}, "kafka", str, [])
        return build_decoder(spec, COLUMNS, source="seg")

    def list_of(nodes):
        return b"\\x02\\x02" * (nodes - 1) + b"\\x02\\x00"

    def run():
        messages = [list_of(MAX_AVRO_DEPTH), list_of(MAX_AVRO_DEPTH + 1), list_of(100_000), list_of(3)]
        inline = decoder({"class.name": PINOT_AVRO, "prop.schema": orjson.dumps(NODE).decode()})
        result = inline.decode(messages, [0, 1, 2, 3])
        print("inline", result.offsets.tolist(), sorted({b.reason for b in result.bad}), flush=True)
        with SchemaRegistryServer() as registry:
            schema_id = registry.register("t-value", orjson.dumps(NODE).decode())
            framed = [b"\\x00" + schema_id.to_bytes(4, "big") + m for m in messages]
            via = decoder({"class.name": PINOT_AVRO_REGISTRY, "prop.schema.registry.rest.url": registry.url})
            result = via.decode(framed, [0, 1, 2, 3])
            print("registry", result.offsets.tolist(), sorted({b.reason for b in result.bad}), flush=True)

    threading.stack_size(1 << 20)  # a consumer thread with 1 MiB of stack (Linux gives 8 MiB by default)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
""")


def test_a_recursive_schemas_messages_nested_too_deep_are_bad_records_and_the_process_lives() -> None:
    """fastavro's C reader overflows the stack at ~5,000 levels (8 MiB): SIGSEGV, on restart too (the same
    offset is read again). Now the message is a bad record, and one nested exactly MAX_AVRO_DEPTH deep decodes
    (in a thread with 1 MiB of stack: fastavro's reader takes ~2 KiB a level)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, orjson.dumps(NODE).decode()], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    reason = f"values nested more than {MAX_AVRO_DEPTH} levels deep (records, arrays, maps)"
    assert done.stdout.splitlines() == [f"inline [0, 3] {[reason]}", f"registry [0, 3] {[reason]}"]


def test_the_depth_of_a_list_at_the_limit_reaches_its_json_column() -> None:
    parsed = reader_schema(orjson.dumps(NODE).decode(), True)
    record = read_record(linked_list(MAX_AVRO_DEPTH), parsed)
    depth, node = 1, record
    while node["next"] is not None:
        depth, node = depth + 1, node["next"]
    assert depth == MAX_AVRO_DEPTH
    assert orjson.loads(orjson.dumps(record["next"]))  # JSON text of it can be written (orjson stops at 255)
    with pytest.raises(MessageError, match="nested more than"):
        read_record(linked_list(MAX_AVRO_DEPTH + 1), parsed)


# Recursive schemas exercising every kind of node: the walk that measures depth must lay out bytes as fastavro
# reads them, or it would let through what fastavro nests deeper.
TREE = {"type": "record", "name": "Tree", "fields": [
    {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "s", "type": "string"},
    {"name": "by", "type": "bytes"}, {"name": "fx", "type": {"type": "fixed", "name": "F3", "size": 3}},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
    {"name": "n", "type": "null"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "kids", "type": {"type": "array", "items": "Tree"}},
    {"name": "byName", "type": {"type": "map", "values": "Tree"}},
    {"name": "maybe", "type": ["null", "string", "Tree"]},
]}


@st.composite
def trees(draw: st.DrawFn, depth: int = 3) -> dict[str, Any]:
    below = trees(depth=depth - 1) if depth > 1 else st.nothing()
    return {
        "b": draw(st.booleans()), "i": draw(st.integers(-(2**31), 2**31 - 1)),
        "l": draw(st.integers(-(2**63), 2**63 - 1)), "f": draw(st.floats(width=32, allow_nan=False)),
        "d": draw(st.floats(allow_nan=False)), "s": draw(st.text(max_size=5)), "by": draw(st.binary(max_size=5)),
        "fx": draw(st.binary(min_size=3, max_size=3)), "e": draw(st.sampled_from(["A", "B", "C"])), "n": None,
        "ts": draw(st.integers(0, 2**40)),
        "kids": draw(st.lists(below, max_size=2)) if depth > 1 else [],
        "byName": draw(st.dictionaries(st.text(max_size=3), below, max_size=2)) if depth > 1 else {},
        "maybe": draw(st.one_of(st.none(), st.text(max_size=3), below) if depth > 1 else st.none()),
    }


TREE_READER = reader_schema(orjson.dumps(TREE).decode(), False)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(), st.data())
def test_the_depth_walk_reads_every_message_as_fastavro_does(tree: dict[str, Any], data: st.DataObject) -> None:
    parsed = TREE_READER
    assert parsed.shape.recursive
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(TREE), tree)
    message = out.getvalue()
    assert nesting_problem(message, parsed.shape) is None
    assert read_record(message, parsed)["kids"] is not None
    cut = data.draw(st.integers(0, len(message) - 1))  # every proper prefix ends inside the record
    assert nesting_problem(message[:cut], parsed.shape) is not None


def test_blocks_of_negative_count_are_walked_as_avro_lays_them_out() -> None:
    """Avro lets a block give -count and then its size in bytes (Java's buffered encoders write them)."""
    schema = {"type": "record", "name": "L", "fields": [
        {"name": "kids", "type": {"type": "array", "items": "L"}},
        {"name": "tags", "type": {"type": "map", "values": "int"}}]}
    parsed = reader_schema(orjson.dumps(schema).decode(), True)
    leaf = b"\x00\x00"  # no kids, no tags
    tags = zigzag(-2) + zigzag(6) + b"\x02a\x02" + b"\x02b\x04" + b"\x00"
    message = zigzag(-2) + zigzag(4) + leaf + leaf + b"\x00" + tags
    assert nesting_problem(message, parsed.shape) is None
    assert read_record(message, parsed) == {"kids": [{"kids": [], "tags": {}}] * 2, "tags": {"a": 1, "b": 2}}


# ---- 2. no message builds more than a bounded multiple of its size -------------------------------------------

def issue(schema: Any) -> str | None:
    return avro_schema_problem(schema if isinstance(schema, str) else json.dumps(schema))


@pytest.mark.parametrize("items", [
    "ns.Empty",  # the full name of a type whose namespace comes from the enclosing record
    "Empty",
    {"type": "record", "name": "Nulls", "fields": [{"name": "a", "type": "null"}, {"name": "b", "type": "ns.Empty"}]},
    {"type": "fixed", "name": "Z", "size": 0},
    {"type": "array", "items": "null"},
])
def test_array_items_that_take_no_bytes_are_refused_whatever_their_name(items: Any) -> None:
    """The namespaced name went unnoticed: a 5-byte message claimed 5,000,000 items (23 s, 858 MB); 2^62 fit in
    11 bytes."""
    schema = {"type": "record", "name": "Outer", "namespace": "ns", "fields": [
        {"name": "e", "type": {"type": "record", "name": "Empty", "fields": []}},
        {"name": "arr", "type": {"type": "array", "items": items}}]}
    assert "items take no bytes" in (issue(schema) or "")


def test_a_named_type_used_many_times_inside_another_is_refused() -> None:
    """Two fields of the next level, 30 levels: one byte would build 2^30 records (the record itself, or each
    item of an array)."""
    doubling: Any = {"type": "record", "name": "D0", "fields": [{"name": "x", "type": "boolean"}]}
    for level in range(1, 31):
        doubling = {"type": "record", "name": f"D{level}", "fields": [
            {"name": "a", "type": doubling}, {"name": "b", "type": f"D{level - 1}"}]}
    found = issue(top(doubling))
    assert found is not None and f"more than {MAX_AVRO_RECORD_VALUES}" in found and "the record builds" in found
    found = issue(top({"type": "array", "items": doubling}))
    assert found is not None and "an array item, map value or union branch (D30)" in found


def test_the_values_an_item_builds_without_bytes_of_its_own_are_limited() -> None:
    assert issue(top({"type": "array", "items": chain(MAX_AVRO_ITEM_VALUES, "boolean")})) is None
    assert "builds 9 values" in (issue(top({"type": "array", "items": chain(MAX_AVRO_ITEM_VALUES + 1, "int")})) or "")
    # a map's values and a union's branches inside an array are items too; outside, the record's own part
    assert issue(top({"type": "map", "values": chain(MAX_AVRO_ITEM_VALUES + 1, "int")})) is not None
    assert issue(top({"type": "array", "items": ["null", chain(MAX_AVRO_ITEM_VALUES + 1, "int")]})) is not None
    assert issue(top(["null", chain(MAX_AVRO_ITEM_VALUES + 1, "int")])) is None
    assert issue(top(["null", chain(150, "int")])) is None
    # in a recursive type every branch repeats
    recursive = {"type": "record", "name": "N", "fields": [
        {"name": "next", "type": ["null", "N", chain(MAX_AVRO_ITEM_VALUES + 1, "int")]}]}
    assert issue(recursive) is not None


def test_a_type_holding_itself_with_nothing_in_between_is_refused() -> None:
    """No message is a value of it: fastavro would recurse without reading a byte (on any message)."""
    looped = {"type": "record", "name": "X", "fields": [{"name": "i", "type": "int"}, {"name": "x", "type": "X"}]}
    assert "has no finite value" in (issue(looped) or "")
    only_self = {"type": "record", "name": "Y", "fields": [{"name": "y", "type": ["Y"]}]}
    assert "has no finite value" in (issue(only_self) or "")
    assert issue(NODE) is None


def test_a_schema_nested_too_deep_is_an_issue_not_a_recursion_error() -> None:
    """250 nested records made the check raise RecursionError (POST /tables answered 500)."""
    def records(levels: int) -> str:  # as text: deeper than orjson and json write
        text = '"string"'
        for level in range(levels):
            text = '{"type": "record", "name": "R%d", "fields": [{"name": "f", "type": %s}]}' % (level, text)
        return text

    assert issue(records(MAX_AVRO_DEPTH)) is None  # the outermost record is level 1
    assert "at most 200" in (issue(records(MAX_AVRO_DEPTH + 1)) or "")
    assert "250 levels" in (issue(records(250)) or "")
    arrays = '"string"'
    for _ in range(1000):
        arrays = '{"type": "array", "items": %s}' % arrays
    assert "1001 levels" in (issue('{"type": "record", "name": "T", "fields": [{"name": "a", "type": %s}]}' % arrays)
                             or "")
    too_deep_for_json = "[" * 2000 + "]" * 2000
    assert "not JSON" in (avro_schema_problem(too_deep_for_json) or "")


def count_values(value: Any) -> int:
    """The Python values a decoded message is made of (every dict, list and leaf)."""
    count, work = 0, [value]
    while work:
        item = work.pop()
        count += 1
        if isinstance(item, dict):
            work.extend(item.values())
        elif isinstance(item, list):
            work.extend(item)
    return count


WORST_CASES = [
    # (schema, a message of about n bytes that builds the most values the schema allows per byte)
    (top({"type": "array", "items": chain(MAX_AVRO_ITEM_VALUES, "boolean")}),
     lambda n: zigzag(n) + b"\x01" * n + b"\x00"),
    (top({"type": "array", "items": ["null", chain(MAX_AVRO_ITEM_VALUES - 1, "null")]}),
     lambda n: zigzag(n) + b"\x02" * n + b"\x00"),
    (top({"type": "array", "items": {"type": "record", "name": "I", "fields": [
        {"name": "u", "type": ["null", chain(MAX_AVRO_ITEM_VALUES - 1, "null", "U")]},
        {"name": "z", "type": chain(MAX_AVRO_ITEM_VALUES - 2, "null", "Z")}]}}),
     lambda n: zigzag(n) + b"\x02" * n + b"\x00"),
    (top({"type": "map", "values": chain(MAX_AVRO_ITEM_VALUES - 1, "null")}),
     lambda n: zigzag(n // 2) + b"".join(zigzag(1) + bytes([32 + i % 90]) for i in range(n // 2)) + b"\x00"),
    (NODE, lambda n: linked_list(min(n // 2, MAX_AVRO_DEPTH))),
    (top({"type": "record", "name": "Wide", "fields": [
        {"name": f"f{i}", "type": chain(9, "null", f"W{i}_")} for i in range(MAX_AVRO_RECORD_VALUES // 10 - 1)]}),
     lambda n: b""),
]


@pytest.mark.parametrize(("schema", "make"), WORST_CASES)
@pytest.mark.parametrize("size", [1, 10, 1000, 20_000])
def test_no_message_builds_more_values_than_the_bound(schema: Any, make: Any, size: int) -> None:
    parsed = reader_schema(orjson.dumps(schema).decode(), True)
    message = make(size)
    built = count_values(fastavro.schemaless_reader(io.BytesIO(message), parsed.parsed, None))
    assert built <= value_bound(parsed.shape, len(message))


def test_a_schema_refused_by_the_limits_is_refused_when_read() -> None:
    with pytest.raises(AvroSchemaRefused, match="items take no bytes"):
        reader_schema(orjson.dumps(top({"type": "array", "items": "null"})).decode(), True)
    with pytest.raises(AvroSchemaRefused, match="must be an Avro record schema"):
        reader_schema('"string"', True)


def test_a_table_stored_with_a_schema_now_refused_cannot_build_its_decoder() -> None:
    from cuvee.config.decoder_config import AvroOptions
    from cuvee.decode import DecoderSetupError
    from cuvee.decode.avro import AvroDecoder

    columns = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [{"name": "a", "dataType": "STRING"}]})
    stored = orjson.dumps(top({"type": "array", "items": "null"})).decode()
    with pytest.raises(DecoderSetupError, match="the table's Avro schema is refused: an array whose items"):
        AvroDecoder(columns, AvroOptions(schema=stored))
