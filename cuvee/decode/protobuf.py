"""Protobuf messages described by a descriptor set file: Pinot's ProtoBufMessageDecoder, with no generated code.

``descriptorFile`` is a ``FileDescriptorSet`` (``protoc --include_imports --descriptor_set_out=events.desc
events.proto``), read when the consumer starts; one that cannot be read or parsed stops the consuming segment
with an error saying why (``DecoderSetupError``). ``protoClassName`` names the message type (full name, or the
bare name when only one type has it); without it, the first message type of the set's last file (the file
protoc compiled; its imports come first). Pinot takes "the first" of an unordered set there.

Values become columns as Pinot's ProtoBufRecordExtractor gives them: a field without presence (a proto3 scalar)
is its value, the default (0, "") included; a field with presence that is not set (proto2 ``optional``, proto3
``optional``, a message field) is null, so the column gets its default; enums are their value's name; ``bytes``
are bytes; repeated fields go to multi-value columns (empty: null); nested messages and maps go to JSON (or
STRING) columns as JSON text of their set fields. A message that does not parse is a bad record; an empty one is
the message of defaults (as in Protobuf).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from cuvee.config.decoder_config import ProtobufOptions
from cuvee.config.schema import Schema
from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.base import DecoderSetupError
from cuvee.decode.rows import MessageError, ParsingDecoder

MAX_DESCRIPTOR_BYTES = 64 << 20


def load_message_type(options: ProtobufOptions) -> Descriptor:
    """The message type to decode, from the descriptor set file; DecoderSetupError saying what is wrong."""
    path = options.descriptor_file
    try:
        size = os.path.getsize(path)
        if size > MAX_DESCRIPTOR_BYTES:
            raise DecoderSetupError(f"the Protobuf descriptor file {path!r} is larger than {MAX_DESCRIPTOR_BYTES} "
                                    "bytes")
        with open(path, "rb") as file:
            data = file.read(MAX_DESCRIPTOR_BYTES + 1)
    except OSError as error:
        raise DecoderSetupError(f"the Protobuf descriptor file {path!r} cannot be read: "
                                f"{error.strerror or type(error).__name__}") from None
    descriptor_set = descriptor_pb2.FileDescriptorSet()
    try:
        descriptor_set.ParseFromString(data)
    except DecodeError:
        raise DecoderSetupError(f"{path!r} is not a Protobuf descriptor set (make one with protoc "
                                "--include_imports --descriptor_set_out=...)") from None
    if not descriptor_set.file:
        raise DecoderSetupError(f"the Protobuf descriptor set {path!r} describes no file")
    pool = descriptor_pool.DescriptorPool()
    for file_proto in descriptor_set.file:
        try:
            pool.Add(file_proto)
        except Exception as error:  # noqa: BLE001 - protobuf raises TypeError/KeyError for a broken set
            raise DecoderSetupError(f"the Protobuf descriptor set {path!r} cannot be loaded ({file_proto.name}: "
                                    f"{str(error).splitlines()[0][:200] if str(error) else type(error).__name__}; "
                                    "was it made with --include_imports?)") from None
    return _message_type(pool, descriptor_set, options.message_type, path)


def _message_type(pool: descriptor_pool.DescriptorPool, descriptor_set: descriptor_pb2.FileDescriptorSet,
                  name: str | None, path: str) -> Descriptor:
    if name is None:
        for file_proto in reversed(descriptor_set.file):
            if file_proto.message_type:
                package = f"{file_proto.package}." if file_proto.package else ""
                return pool.FindMessageTypeByName(package + file_proto.message_type[0].name)
        raise DecoderSetupError(f"the Protobuf descriptor set {path!r} has no message type")
    try:
        return pool.FindMessageTypeByName(name)
    except KeyError:
        pass
    matches = [f"{fp.package}.{m.name}" if fp.package else m.name
               for fp in descriptor_set.file for m in fp.message_type if m.name == name]
    if len(matches) == 1:
        return pool.FindMessageTypeByName(matches[0])
    if matches:
        raise DecoderSetupError(f"protoClassName {name!r} names several message types in {path!r}: "
                                f"{', '.join(matches)}; give the full name")
    raise DecoderSetupError(f"protoClassName {name!r} is not a message type of {path!r}")


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return _record(value)
    return value


def _record(message: Message) -> dict[str, Any] | None:
    """A nested message as Pinot's extractor gives it: its set fields by name (None when none is set)."""
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        out[field.name] = _field(field, value)
    return out or None


def _field(field: FieldDescriptor, value: Any) -> Any:
    if _is_map(field):
        value_field = field.message_type.fields_by_name["value"]
        converted = {key: _value(value_field, item) for key, item in value.items()}
        return {key: item for key, item in converted.items() if item is not None} or None
    if field.is_repeated:
        items = [_value(field, item) for item in value]
        return [item for item in items if item is not None] or None
    return _value(field, value)


class ProtobufDecoder(ParsingDecoder):
    """ProtoBufMessageDecoder; ``message_type`` from ``load_message_type`` (the factory reads the file)."""

    empty_is_bad = False  # zero bytes are a message whose fields all have their defaults

    def __init__(self, schema: Schema, message_type: Descriptor, bad_record_log: BadRecordLog | None = None, *,
                 source: str = ""):
        super().__init__(schema, bad_record_log, source=source)
        self._message_class = message_factory.GetMessageClass(message_type)
        self._fields = [field for field in message_type.fields if field.name in set(schema.column_names)]

    def parse(self, raw: bytes) -> Mapping[str, Any]:
        message = self._message_class()
        try:
            message.ParseFromString(raw)
        except DecodeError as error:
            raise MessageError(f"not a Protobuf {self._message_class.DESCRIPTOR.full_name} message "
                               f"({str(error)[:200]})") from None
        row: dict[str, Any] = {}
        for field in self._fields:
            if field.is_repeated:
                row[field.name] = _field(field, getattr(message, field.name))
            elif field.has_presence and not message.HasField(field.name):
                row[field.name] = None
            else:
                row[field.name] = _value(field, getattr(message, field.name))
        return row
