"""Decoders: stream message bytes to Arrow columns of a table's schema (JSON built in)."""

from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.base import BadRecord, DecodeResult, Decoder
from cuvee.decode.json import JsonDecoder

__all__ = ["BadRecord", "BadRecordLog", "DecodeResult", "Decoder", "JsonDecoder"]
