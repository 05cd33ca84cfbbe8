"""Avro messages in Confluent's wire format, their schemas read from a Confluent Schema Registry: Pinot's
KafkaConfluentSchemaRegistryAvroMessageDecoder.

A message is a 0 byte, the schema id (4 bytes, big-endian) and an Avro record written with that schema
(``cuvee.decode.avro`` reads it). The registry is asked for each id once (confluent-kafka's SchemaRegistryClient,
``GET /schemas/ids/{id}``) and the parsed schema is kept (``cached.schema.map.capacity`` ids, least recently used
first out), shared by the decoders of the server process that reach the registry with the same URL, credentials
and TLS settings.

What becomes of a message:

- not in the wire format (no 0 byte, shorter than 5 bytes), or an id of 2^31 or more (the registry's ids are
  Java ints; Confluent's Java deserializer reads such an id as negative): a bad record;
- an id the registry says it does not have (HTTP 404 with the registry's own ``error_code`` 40403), a schema that
  is not Avro, uses references, is not a record or is beyond ``cuvee.config.avro_limits``, a record that does not
  fit its schema: a bad record with the reason;
- anything else from the registry: unreachable, timing out, refusing the credentials, HTTP 5xx, any other 4xx
  (a 404 without 40403 is a proxy's or a wrong path's, not the registry's word on the id), an answer that is not
  the registry's JSON or holds no schema: ``DecoderUnavailable``. The consumer decodes nothing of that batch,
  keeps its offset and tries again with backoff until the registry answers; a blip delays rows, it never loses
  them (docs/server.md).

Credentials in the URL (``basic.auth.credentials.source=URL``) are taken out of it and given to the client as
``basic.auth.user.info``: the client's HTTP library logs every request's URL (at INFO).
"""

from __future__ import annotations

import collections
import hashlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import orjson

from cuvee.config.avro_limits import AvroSchemaRefused
from cuvee.config.decoder_config import RegistryOptions
from cuvee.config.schema import Schema
from cuvee.decode.avro import ReaderSchema, read_record, reader_schema
from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.base import DecoderSetupError, DecoderUnavailable
from cuvee.decode.rows import MessageError, ParsingDecoder

log = logging.getLogger(__name__)

MAGIC_BYTE = 0
HEADER_BYTES = 5
SCHEMA_NOT_FOUND = 40403  # the registry's error_code for an id it does not have
MAX_SCHEMA_ID = 2**31 - 1  # ids are Java ints


@dataclass(frozen=True)
class _Refused:
    """Why messages written with a schema id are bad records (never mistaken for a schema)."""

    reason: str


def _without_credentials(url: str, *, keep_query: bool = False) -> str:
    """The registry's URL(s) without user or password (as they may be shown, or given to the client)."""
    shown = []
    for part in url.split(","):
        parsed = urlsplit(part.strip())
        host = parsed.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parsed.port}" if parsed.port else host
        shown.append(urlunsplit((parsed.scheme, netloc, parsed.path, parsed.query if keep_query else "", "")))
    return ",".join(shown)


def _url_user_info(url: str) -> str | None:
    """``user:password`` of the first of the URLs that holds credentials, decoded; None if none does."""
    for part in url.split(","):
        parsed = urlsplit(part.strip())
        if parsed.username:
            return f"{unquote(parsed.username)}:{unquote(parsed.password or '')}"
    return None


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
        self._refused: dict[int, _Refused] = {}

    def parse(self, raw: bytes) -> Mapping[str, Any]:
        if len(raw) < HEADER_BYTES or raw[0] != MAGIC_BYTE:
            raise MessageError("not in Confluent's wire format (a 0 byte, a 4-byte schema id, then Avro): unknown "
                               "magic byte")
        schema_id = int.from_bytes(raw[1:HEADER_BYTES], "big")
        found = self._schema(schema_id)
        if isinstance(found, _Refused):
            raise MessageError(found.reason)
        return read_record(memoryview(raw)[HEADER_BYTES:], found)

    def _schema(self, schema_id: int) -> ReaderSchema | _Refused:
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        refused = self._refused.get(schema_id)
        if refused is not None:
            return refused
        found = self._fetch(schema_id)
        if isinstance(found, _Refused):
            if len(self._refused) < self._options.cache_capacity:
                self._refused[schema_id] = found
        else:
            self._schemas.put(schema_id, found)
        return found

    def _fetch(self, schema_id: int) -> ReaderSchema | _Refused:
        """The schema of ``schema_id`` ready to read, or why its messages are bad; DecoderUnavailable if the
        registry does not say (only its own "not found" and a usable answer are its word)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if schema_id > MAX_SCHEMA_ID:
            return _Refused(f"schema id {schema_id} cannot be in a schema registry (ids are below 2^31)")
        asked = f"the schema registry at {self._shown_url}"
        try:
            registered = self._client.get_schema(schema_id)
        except SchemaRegistryError as error:
            if error.http_status_code == 404 and error.error_code == SCHEMA_NOT_FOUND:
                return _Refused(f"schema id {schema_id} is not in the schema registry")
            status = error.http_status_code
            if status == 404:
                why = (f"without the registry's 'schema not found' (error code {SCHEMA_NOT_FOUND}): a proxy's or a "
                       "wrong path's answer?")
            else:
                why = f"(error code {error.error_code})" if error.error_code not in (None, -1) else ""
            raise DecoderUnavailable(f"{asked} answered HTTP {status} for schema id {schema_id} {why}".rstrip()) \
                from None
        except ValueError:  # the body of a successful answer is not JSON (a proxy's page)
            raise DecoderUnavailable(f"{asked} answered schema id {schema_id} with something that is not the "
                                     "registry's JSON") from None
        except Exception as error:  # noqa: BLE001 - transport errors, timeouts, TLS: the registry cannot be read
            raise DecoderUnavailable(f"{asked} cannot be reached ({type(error).__name__})") from None
        text = getattr(registered, "schema_str", None)
        if not isinstance(text, str) or not text.strip():
            _forget(self._client)  # the client kept the empty answer: ask again next time
            raise DecoderUnavailable(f"{asked} answered schema id {schema_id} without a schema")
        kind = (registered.schema_type or "AVRO").upper()
        if kind != "AVRO":
            return _Refused(f"schema id {schema_id} is a {kind} schema, not Avro")
        if registered.references:
            return _Refused(f"schema id {schema_id} refers to other schemas (references are not supported)")
        try:
            return reader_schema(text, self._options.logical_types)
        except AvroSchemaRefused as refused:
            return _Refused(f"schema id {schema_id} is refused: {refused}")
        except Exception as error:  # noqa: BLE001 - a registered schema fastavro cannot read
            return _Refused(f"schema id {schema_id} is not an Avro schema Cuvee can read ({type(error).__name__}: "
                            f"{str(error).splitlines()[0][:200] if str(error) else ''})")


def _forget(client: Any) -> None:
    clear = getattr(client, "clear_caches", None)
    if callable(clear):
        clear()


class _SchemaCache:
    """Parsed schemas by id, least recently used out first; thread-safe (consumers of several segments)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._schemas: collections.OrderedDict[int, ReaderSchema] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, schema_id: int) -> ReaderSchema | None:
        with self._lock:
            found = self._schemas.get(schema_id)
            if found is not None:
                self._schemas.move_to_end(schema_id)
            return found

    def put(self, schema_id: int, schema: ReaderSchema) -> None:
        with self._lock:
            self._schemas[schema_id] = schema
            while len(self._schemas) > self.capacity:
                self._schemas.popitem(last=False)


_CACHES: dict[tuple[str, bool, str], _SchemaCache] = {}
_CACHES_LOCK = threading.Lock()


def _shared_cache(options: RegistryOptions) -> _SchemaCache:
    """The cache of this registry in this process, as this decoder reaches it (URL, credentials, TLS settings)
    and with its logical-type setting: a server's consuming segments of one table (and of tables reaching the
    same registry alike) ask the registry for a schema id once between them, and a decoder whose credentials
    the registry refuses never reads what another decoder was allowed to (the key holds a digest of them)."""
    access = hashlib.sha256(orjson.dumps([options.url, list(options.client_settings)])).hexdigest()
    key = (_without_credentials(options.url), options.logical_types, access)
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

    settings: dict[str, Any] = {"url": _without_credentials(options.url, keep_query=True), "max.retries": 0,
                                "timeout": timeout_seconds, "cache.capacity": options.cache_capacity,
                                **dict(options.client_settings)}
    in_url = _url_user_info(options.url)
    if in_url is not None:  # basic.auth.credentials.source=URL: kept out of the URLs the client logs
        settings["basic.auth.user.info"] = in_url
    try:
        return SchemaRegistryClient(settings)
    except Exception as error:  # noqa: BLE001 - its checks raise ValueError/TypeError/OSError (certificate files)
        text = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
        for key, value in [*settings.items(), ("url", options.url)]:
            if key in ("basic.auth.user.info", "ssl.key.password", "url") and isinstance(value, str) and value:
                text = text.replace(value, "***")
        raise DecoderSetupError(f"the schema registry client cannot be made for {_without_credentials(options.url)}: "
                                f"{text}") from None
