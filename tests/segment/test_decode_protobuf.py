"""Protobuf from a descriptor set file (Pinot's ProtoBufMessageDecoder), no generated code: every column type,
presence and defaults, enums, nested messages and maps as JSON text, bad messages with offsets, and descriptor
files that cannot be used (DecoderSetupError, which puts the consuming segment in ERROR)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from cuvee.config.decoder_config import PINOT_PROTOBUF
from cuvee.decode import DecoderSetupError
from tests.segment.decoder_helpers import TS, as_rows, decoder_of, expected, row

F = descriptor_pb2.FieldDescriptorProto


def _field(name: str, number: int, kind: int, *, repeated: bool = False, type_name: str = "",
           optional: bool = False, oneof: int | None = None) -> descriptor_pb2.FieldDescriptorProto:
    field = F(name=name, number=number, type=kind, label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
    if type_name:
        field.type_name = type_name
    if optional:
        field.proto3_optional = True
    if oneof is not None:
        field.oneof_index = oneof
    return field


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """events.proto (proto3): what ``protoc --include_imports --descriptor_set_out`` would write."""
    doc = descriptor_pb2.DescriptorProto(name="Doc", field=[_field("k", 1, F.TYPE_STRING), _field("n", 2, F.TYPE_INT64)])
    entry = descriptor_pb2.DescriptorProto(
        name="CountsEntry", field=[_field("key", 1, F.TYPE_STRING), _field("value", 2, F.TYPE_INT64)],
        options=descriptor_pb2.MessageOptions(map_entry=True))
    event = descriptor_pb2.DescriptorProto(name="Event", nested_type=[entry], field=[
        _field("i", 1, F.TYPE_INT32), _field("b", 2, F.TYPE_BOOL),
        _field("s", 3, F.TYPE_STRING, optional=True, oneof=0),
        _field("raw", 4, F.TYPE_BYTES), _field("doc", 5, F.TYPE_MESSAGE, type_name=".test.Doc"),
        _field("tags", 6, F.TYPE_STRING, repeated=True), _field("nums", 7, F.TYPE_INT32, repeated=True),
        _field("l", 8, F.TYPE_INT64), _field("f", 9, F.TYPE_FLOAT), _field("d", 10, F.TYPE_DOUBLE),
        _field("ts", 11, F.TYPE_INT64), _field("color", 12, F.TYPE_ENUM, type_name=".test.Color"),
        _field("counts", 13, F.TYPE_MESSAGE, repeated=True, type_name=".test.Event.CountsEntry")],
        oneof_decl=[descriptor_pb2.OneofDescriptorProto(name="_s")])
    color = descriptor_pb2.EnumDescriptorProto(name="Color", value=[
        descriptor_pb2.EnumValueDescriptorProto(name="RED", number=0),
        descriptor_pb2.EnumValueDescriptorProto(name="GREEN", number=1)])
    file = descriptor_pb2.FileDescriptorProto(name="events.proto", package="test", syntax="proto3",
                                              message_type=[doc, event], enum_type=[color])
    return descriptor_pb2.FileDescriptorSet(file=[file])


def event_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_set().file[0])
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("test.Event"))


EVENT = event_class()


def message(n: int, **changes: Any) -> bytes:
    values = {**row(n), **changes}
    out = EVENT(i=values["i"], b=values["b"], raw=values["raw"], tags=values["tags"], nums=values["nums"],
                l=values["l"], f=values["f"], d=values["d"], ts=values["ts"], color=n % 2)
    if values["s"] is not None:
        out.s = values["s"]
    if values["doc"] is not None:
        out.doc.k, out.doc.n = values["doc"]["k"], values["doc"]["n"]
    return out.SerializeToString()


@pytest.fixture
def descriptor_file(tmp_path: Path) -> Path:
    path = tmp_path / "events.desc"
    path.write_bytes(descriptor_set().SerializeToString())
    return path


def config(path: Path | str, **props: str) -> dict[str, str]:
    return {"stream.kafka.decoder.class.name": PINOT_PROTOBUF, "stream.kafka.decoder.prop.descriptorFile": str(path),
            **{f"stream.kafka.decoder.prop.{k}": v for k, v in props.items()}}


def test_every_column_type(descriptor_file: Path) -> None:
    decoder = decoder_of(config(descriptor_file, protoClassName="test.Event"))
    result = decoder.decode([message(n) for n in range(1, 4)], [7, 8, 9])
    assert result.bad == [] and result.offsets.tolist() == [7, 8, 9]
    assert as_rows(result.batch) == [expected(n) for n in range(1, 4)]


def test_presence_defaults_enums_and_maps(descriptor_file: Path) -> None:
    from cuvee.config.schema import Schema
    from tests.segment.decoder_helpers import SCHEMA

    schema = Schema.from_json({**SCHEMA.to_json(), "dimensionFieldSpecs": [
        *SCHEMA.to_json()["dimensionFieldSpecs"], {"name": "color", "dataType": "STRING"},
        {"name": "counts", "dataType": "JSON"}]})
    empty = EVENT()
    with_map = EVENT(color=1)
    with_map.counts["a"] = 3
    result = decoder_of(config(descriptor_file, protoClassName="test.Event"), schema).decode(
        [empty.SerializeToString(), with_map.SerializeToString()], [0, 1])
    assert result.bad == []
    first, second = as_rows(result.batch)
    # proto3 scalars without presence are their default values; fields with presence and empty repeated are null
    assert (first["i"], first["b"], first["l"], first["f"], first["raw"]) == (0, False, 0, 0.0, b"")
    assert (first["s"], first["doc"], first["tags"], first["counts"]) == (None, None, None, None)
    assert (first["color"], second["color"]) == ("RED", "GREEN")
    assert orjson.loads(second["counts"]) == {"a": 3}


def test_the_first_message_type_is_the_default_and_short_names_work(descriptor_file: Path) -> None:
    by_default = decoder_of(config(descriptor_file))  # the file's first message type is Doc
    result = by_default.decode([EVENT(i=5).SerializeToString()], [0])
    assert result.batch.column("i").to_pylist() == [None]  # Doc has no field i
    by_short_name = decoder_of(config(descriptor_file, protoClassName="Event"))
    assert by_short_name.decode([EVENT(i=5).SerializeToString()], [0]).batch.column("i").to_pylist() == [5]


def test_bad_messages_are_counted_with_their_offsets(descriptor_file: Path) -> None:
    decoder = decoder_of(config(descriptor_file, protoClassName="test.Event"))
    result = decoder.decode([message(1), b"\x0a\xff", message(2), b"\x08", EVENT(l=2**62).SerializeToString()],
                            [3, 4, 5, 6, 7])
    assert result.offsets.tolist() == [3, 5, 7]
    assert [b.offset for b in result.bad] == [4, 6]
    assert all(b.reason.startswith("not a Protobuf test.Event message") for b in result.bad)


@pytest.mark.parametrize(("setup", "message_text"), [
    (lambda p: None, "cannot be read: No such file or directory"),
    (lambda p: p.write_bytes(b"\xff\xff\xff\xff"), "is not a Protobuf descriptor set"),
    (lambda p: p.write_bytes(descriptor_pb2.FileDescriptorSet(file=[descriptor_pb2.FileDescriptorProto(
        name="a.proto", dependency=["missing.proto"])]).SerializeToString()), "was it made with --include_imports"),
])
def test_a_descriptor_file_that_cannot_be_used_fails_the_setup(tmp_path: Path, setup: Any, message_text: str) -> None:
    path = tmp_path / "events.desc"
    setup(path)
    with pytest.raises(DecoderSetupError, match=message_text):
        decoder_of(config(path))


def test_an_unknown_message_type_fails_the_setup(descriptor_file: Path) -> None:
    with pytest.raises(DecoderSetupError, match="'test.Nope' is not a message type"):
        decoder_of(config(descriptor_file, protoClassName="test.Nope"))


def test_timestamp_from_an_int64(descriptor_file: Path) -> None:
    result = decoder_of(config(descriptor_file, protoClassName="test.Event")).decode(
        [EVENT(ts=TS).SerializeToString()], [0])
    assert as_rows(result.batch)[0]["ts"] == TS
