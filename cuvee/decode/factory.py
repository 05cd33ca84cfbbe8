"""The one place a decoder is made from a table's ``DecoderSpec`` (``cuvee.config.decoder_config``): consuming
segments call it with the schema the decoder must read (``cuvee.decode.transform.decode_schema``: the table's
columns plus the fields its ingestion transforms read).

Formats other than JSON import their libraries (fastavro, protobuf, confluent-kafka's registry client) only when a
table uses them. Raises DecoderSetupError when the decoder cannot be built where it runs (a descriptor file that
cannot be read, registry client settings it refuses).
"""

from __future__ import annotations

from cuvee.config.decoder_config import (
    AvroOptions,
    CsvOptions,
    DecoderKind,
    DecoderSpec,
    ProtobufOptions,
    RegistryOptions,
)
from cuvee.config.schema import Schema
from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.base import Decoder
from cuvee.decode.json import JsonDecoder


def build_decoder(spec: DecoderSpec, schema: Schema, *, source: str = "", bad_record_log: BadRecordLog | None = None,
                  registry_timeout_seconds: float = 10.0) -> Decoder:
    """A decoder of ``spec``'s format into ``schema``'s columns; ``source`` names the segment in bad-record logs."""
    options = spec.options
    if spec.kind is DecoderKind.JSON:
        return JsonDecoder(schema, bad_record_log, source=source)
    if spec.kind is DecoderKind.AVRO:
        from cuvee.decode.avro import AvroDecoder

        assert isinstance(options, AvroOptions)
        return AvroDecoder(schema, options, bad_record_log, source=source)
    if spec.kind is DecoderKind.AVRO_REGISTRY:
        from cuvee.decode.registry import RegistryAvroDecoder

        assert isinstance(options, RegistryOptions)
        return RegistryAvroDecoder(schema, options, bad_record_log, source=source,
                                   timeout_seconds=registry_timeout_seconds)
    if spec.kind is DecoderKind.PROTOBUF:
        from cuvee.decode.protobuf import ProtobufDecoder, load_message_type

        assert isinstance(options, ProtobufOptions)
        return ProtobufDecoder(schema, load_message_type(options), bad_record_log, source=source)
    from cuvee.decode.csv import CsvDecoder

    assert isinstance(options, CsvOptions)
    return CsvDecoder(schema, options, bad_record_log, source=source)
