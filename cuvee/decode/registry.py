"""Avro messages in Confluent's wire format, their schemas read from a Confluent Schema Registry: Pinot's
KafkaConfluentSchemaRegistryAvroMessageDecoder.

A message is a 0 byte, the schema id (4 bytes, big-endian) and an Avro record written with that schema
(``cuvee.decode.avro`` reads it). The registry is asked for each id once (confluent-kafka's SchemaRegistryClient,
``GET /schemas/ids/{id}``) and the parsed schema is kept (``cached.schema.map.capacity`` ids, least recently used
first out).

What becomes of a message:

- not in the wire format (no 0 byte, shorter than 5 bytes): a bad record (Pinot discards those too);
- an id the registry answers 404 for, a schema that is not Avro or uses references, a record that does not fit
  its schema: a bad record with the reason;
- the registry unreachable, timing out, refusing the credentials or answering 5xx: ``DecoderUnavailable``. The
  consumer decodes nothing of that batch, keeps its offset and tries again with backoff until the registry
  answers; a blip delays rows, it never loses them (docs/server.md).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from cuvee.config.avro_limits import AvroSchemaRefused
from cuvee.config.decoder_config import RegistryOptions
from cuvee.config.schema import Schema
from cuvee.decode.avro import read_record, reader_schema
from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.base import DecoderSetupError, DecoderUnavailable
from cuvee.decode.rows import MessageError, ParsingDecoder

log = logging.getLogger(__name__)

MAGIC_BYTE = 0
HEADER_BYTES = 5


def _without_credentials(url: str) -> str:
    """The registry's URL(s) as they may be shown: no user or password."""
    shown = []
    for part in url.split(","):
        parsed = urlsplit(part.strip())
        host = parsed.hostname or ""
        netloc = f"{host}:{parsed.port}" if parsed.port else host
        shown.append(urlunsplit((parsed.scheme, netloc, parsed.path, "", "")))
    return ",".join(shown)


class RegistryAvroDecoder(ParsingDecoder):
    """Confluent-framed Avro; ``client`` is a SchemaRegistryClient (made from ``options`` when not given)."""

    def __init__(self, schema: Schema, options: RegistryOptions, bad_record_log: BadRecordLog | None = None, *,
                 source: str = "", timeout_seconds: float = 10.0, client: Any = None):
        super().__init__(schema, bad_record_log, source=source)
        self._options = options
        self._shown_url = _without_credentials(options.url)
        self._client = client if client is not None else _client(options, timeout_seconds)
        # schema id -> fastavro schema, shared by the decoders of this registry in the process (ids never change)
        self._schemas = _shared_cache(options)
        # schema id -> why messages written with it are bad (this decoder's: the registry may learn the id later)
        self._refused: dict[int, str] = {}

    def parse(self, raw: bytes) -> Mapping[str, Any]:
        if len(raw) < HEADER_BYTES or raw[0] != MAGIC_BYTE:
            raise MessageError("not in Confluent's wire format (a 0 byte, a 4-byte schema id, then Avro): unknown "
                               "magic byte")
        schema_id = int.from_bytes(raw[1:HEADER_BYTES], "big")
        found = self._schema(schema_id)
        if isinstance(found, str):
            raise MessageError(found)
        return read_record(memoryview(raw)[HEADER_BYTES:], found)

    def _schema(self, schema_id: int) -> Any:
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        refused = self._refused.get(schema_id)
        if refused is not None:
            return refused
        found = self._fetch(schema_id)
        if isinstance(found, str):
            if len(self._refused) < self._options.cache_capacity:
                self._refused[schema_id] = found
        else:
            self._schemas.put(schema_id, found)
        return found

    def _fetch(self, schema_id: int) -> Any:
        """The parsed schema of ``schema_id``, or why its messages are bad; DecoderUnavailable if the registry
        cannot say."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            registered = self._client.get_schema(schema_id)
        except SchemaRegistryError as error:
            if error.http_status_code == 404:
                return f"schema id {schema_id} is not in the schema registry"
            raise DecoderUnavailable(f"the schema registry at {self._shown_url} answered HTTP "
                                     f"{error.http_status_code} for schema id {schema_id}") from None
        except Exception as error:  # noqa: BLE001 - transport errors, timeouts, TLS: the registry cannot be read
            raise DecoderUnavailable(f"the schema registry at {self._shown_url} cannot be reached "
                                     f"({type(error).__name__})") from None
        kind = (registered.schema_type or "AVRO").upper()
        if kind != "AVRO":
            return f"schema id {schema_id} is a {kind} schema, not Avro"
        if registered.references:
            return f"schema id {schema_id} refers to other schemas (references are not supported)"
        try:
            return reader_schema(registered.schema_str, self._options.logical_types)
        except AvroSchemaRefused as refused:
            return f"schema id {schema_id} is refused: {refused}"
        except Exception as error:  # noqa: BLE001 - a registered schema fastavro cannot read, or one refused
            return f"schema id {schema_id} is not an Avro schema Cuvee can read ({type(error).__name__}: " \
                   f"{str(error).splitlines()[0][:200] if str(error) else ''})"


class _SchemaCache:
    """Parsed schemas by id, least recently used out first; thread-safe (consumers of several segments)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._schemas: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, schema_id: int) -> Any:
        with self._lock:
            found = self._schemas.get(schema_id)
            if found is not None:
                self._schemas.move_to_end(schema_id)
            return found

    def put(self, schema_id: int, schema: Any) -> None:
        with self._lock:
            self._schemas[schema_id] = schema
            while len(self._schemas) > self.capacity:
                self._schemas.popitem(last=False)


_CACHES: dict[tuple[str, bool], _SchemaCache] = {}
_CACHES_LOCK = threading.Lock()


def _shared_cache(options: RegistryOptions) -> _SchemaCache:
    """The cache of this registry (URL) and logical-type setting in this process: a server's consuming segments
    of one table (and of tables on the same registry) ask the registry for a schema id once between them."""
    key = (options.url, options.logical_types)
    with _CACHES_LOCK:
        cache = _CACHES.get(key)
        if cache is None:
            cache = _CACHES[key] = _SchemaCache(options.cache_capacity)
        cache.capacity = max(cache.capacity, options.cache_capacity)
        return cache


def _client(options: RegistryOptions, timeout_seconds: float) -> Any:
    """confluent-kafka's registry client: no retries of its own (they sleep; the consumer's backoff can be
    interrupted), a bounded timeout per request."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    settings: dict[str, Any] = {"url": options.url, "max.retries": 0, "timeout": timeout_seconds,
                                "cache.capacity": options.cache_capacity, **dict(options.client_settings)}
    try:
        return SchemaRegistryClient(settings)
    except Exception as error:  # noqa: BLE001 - its checks raise ValueError/TypeError/OSError (certificate files)
        text = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
        for key, value in settings.items():
            if key in ("basic.auth.user.info", "ssl.key.password", "url") and isinstance(value, str) and value:
                text = text.replace(value, "***")
        raise DecoderSetupError(f"the schema registry client cannot be made for {_without_credentials(options.url)}: "
                                f"{text}") from None
