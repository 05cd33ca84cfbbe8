"""CSV messages, one record each: Pinot's CSVMessageDecoder.

With the ``header`` prop (column names separated by the delimiter) each message is one data line; with
``skipHeader`` too, each message starts with a header line that is skipped. Without ``header`` (Pinot's behaviour)
each message carries its own header line, then the data line. Values are text, coerced by the usual rules
(``cuvee.decode.rows``): an empty value or ``nullStringValue`` is null (the column's default), a multi-value
column's value is split at ``multiValueDelimiter`` (default ``;``, empty parts dropped), a BYTES column's value is
hex.

Differs from Pinot: only multi-value columns are split (Pinot splits any value holding the delimiter, then fails
on a single-value column); a message with more than one record, or more values than the header names, is a bad
record (Pinot keeps the first record and ignores the rest); comment lines are recognised by the record's first
character. As in Pinot, a field is as long as its message allows (Python's csv module stops at 128 KiB unless
told otherwise).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from cuvee.config.decoder_config import CsvOptions
from cuvee.config.schema import Schema
from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.rows import MessageError, ParsingDecoder


# Python's csv module refuses a field over 128 KiB (a process-wide limit); commons-csv, which Pinot's decoder uses,
# has none. A field is never longer than its message, which the stream bounds, so the limit goes (2^31 - 1 is the
# largest every platform's C long holds).
csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))


class _Dialect(csv.Dialect):
    lineterminator = "\n"
    skipinitialspace = False
    doublequote = True
    strict = True


class CsvDecoder(ParsingDecoder):
    """CSVMessageDecoder with ``options`` resolved by ``cuvee.config.decoder_config``."""

    def __init__(self, schema: Schema, options: CsvOptions, bad_record_log: BadRecordLog | None = None, *,
                 source: str = ""):
        super().__init__(schema, bad_record_log, source=source)
        self._options = options
        self._multi = frozenset(spec.name for spec in schema.fields if not spec.single_value)
        dialect = type("CsvMessage", (_Dialect,), {
            "delimiter": options.delimiter,
            "quotechar": options.quote_character,
            "escapechar": options.escape_character,
            "quoting": csv.QUOTE_MINIMAL if options.quote_character is not None else csv.QUOTE_NONE,
            "doublequote": options.quote_character is not None and options.escape_character is None,
        })
        self._dialect = dialect

    def _records(self, text: str) -> list[list[str]]:
        records = []
        try:
            for record in csv.reader(io.StringIO(text, newline=""), self._dialect):
                if not record:  # an empty line
                    if self._options.ignore_empty_lines:
                        continue
                    record = [""]
                if self._options.comment_marker is not None and record[0].startswith(self._options.comment_marker):
                    continue
                records.append(record)
        except csv.Error as error:
            raise MessageError(f"not CSV: {error}") from None
        return records

    def parse(self, raw: bytes) -> Mapping[str, Any]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MessageError("not UTF-8 text") from None
        records = self._records(text)
        header = self._options.header
        if header is None:
            if not records:
                raise MessageError("no header line (without the header prop, each message starts with one)")
            header = tuple(name.strip() for name in records.pop(0))
        elif self._options.skip_header and records:
            records.pop(0)
        if len(records) != 1:
            raise MessageError(f"holds {len(records)} records; a message is one record")
        values = records[0]
        if len(values) > len(header):
            raise MessageError(f"{len(values)} values but the header names {len(header)} columns")
        return {name: self._value(name, value) for name, value in zip(header, values)}

    def _value(self, name: str, value: str) -> Any:
        options = self._options
        if options.ignore_surrounding_spaces:
            value = value.strip()
        if value == "" or value == options.null_string:
            return None
        if name in self._multi:
            return [part for part in value.split(options.multi_value_delimiter) if part]
        return value
