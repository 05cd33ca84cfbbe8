"""Decoders: stream message bytes to Arrow columns of a table's schema (JSON, Avro, Protobuf, CSV; ``factory``)."""

from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.base import BadRecord, DecodeResult, Decoder, DecoderSetupError, DecoderUnavailable
from cuvee.decode.json import JsonDecoder

__all__ = ["BadRecord", "BadRecordLog", "DecodeResult", "Decoder", "DecoderSetupError", "DecoderUnavailable",
           "JsonDecoder"]
