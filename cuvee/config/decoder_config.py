"""Which decoder a stream's messages need: Pinot's ``stream.<type>.decoder.class.name`` and its
``stream.<type>.decoder.prop.*`` keys, parsed into a ``DecoderSpec`` (pure; ``cuvee.decode.factory`` builds it).

Pinot's class names are mapped to Cuvee's decoders:

| Pinot class | Cuvee decoder | props |
|---|---|---|
| ``...stream.kafka.KafkaJSONMessageDecoder``, ``...inputformat.json.JSONMessageDecoder`` | JSON (the default) | none |
| ``...inputformat.avro.SimpleAvroMessageDecoder`` | Avro, inline writer schema | ``schema``, ``enableLogicalTypes`` |
| ``...avro.confluent.KafkaConfluentSchemaRegistryAvroMessageDecoder`` | Avro through a Confluent Schema Registry | ``schema.registry.rest.url``, ``cached.schema.map.capacity``, ``basic.auth.*``, ``schema.registry.ssl.*``, ``enableLogicalTypes`` |
| ``...inputformat.protobuf.ProtoBufMessageDecoder`` | Protobuf from a descriptor set file | ``descriptorFile``, ``protoClassName`` |
| ``...inputformat.csv.CSVMessageDecoder`` | CSV, one record a message | ``fileFormat``, ``delimiter``, ``header``, ``skipHeader``, ``multiValueDelimiter``, ``nullStringValue``, ``commentMarker``, ``escapeCharacter``, ``quoteCharacter``, ``ignoreEmptyLines``, ``ignoreSurroundingSpaces`` |

Every decoder also takes ``format`` (Pinot's examples set it, its decoders never read it), which must then name the
decoder's format (JSON, AVRO, PROTOBUF, CSV). Any other class, an unknown prop, or a required prop missing or
unusable (an inline Avro schema that does not parse or is beyond ``cuvee.config.avro_limits``, a registry URL
that is not http(s), a Java key store) is a
ConfigIssue naming the key: the table is refused (400) rather than created with a decoder that turns every
message into a bad row. A descriptor file is read where
the consumer runs (servers), so only its path's form is checked here. Secrets (registry credentials) are kept out
of reprs and never put into messages.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from cuvee.config.avro_limits import AvroSchemaRefused, avro_shape, record_problem
from cuvee.config.errors import ConfigIssue
from cuvee.config.kafka_security import PEM_KEYSTORE_CONVERSION, TRUSTSTORE_CONVERSION

PINOT_JSON = "org.apache.pinot.plugin.stream.kafka.KafkaJSONMessageDecoder"
PINOT_JSON_INPUTFORMAT = "org.apache.pinot.plugin.inputformat.json.JSONMessageDecoder"
PINOT_JSON_LEGACY = "org.apache.pinot.core.realtime.impl.kafka.KafkaJSONMessageDecoder"
PINOT_AVRO = "org.apache.pinot.plugin.inputformat.avro.SimpleAvroMessageDecoder"
PINOT_AVRO_REGISTRY = "org.apache.pinot.plugin.inputformat.avro.confluent.KafkaConfluentSchemaRegistryAvroMessageDecoder"
PINOT_PROTOBUF = "org.apache.pinot.plugin.inputformat.protobuf.ProtoBufMessageDecoder"
PINOT_CSV = "org.apache.pinot.plugin.inputformat.csv.CSVMessageDecoder"
PINOT_AVRO_EXTRACTOR = "org.apache.pinot.plugin.inputformat.avro.AvroRecordExtractor"

# Pinot decoders Cuvee knows and does not run, with what to use instead.
_REFUSED_CLASSES = {
    "org.apache.pinot.plugin.inputformat.avro.KafkaAvroMessageDecoder":
        "it reads schemas by MD5 from LinkedIn's schema registry, which Cuvee does not speak; use "
        f"{PINOT_AVRO_REGISTRY} (Confluent's registry) or {PINOT_AVRO} (an inline schema)",
    "org.apache.pinot.plugin.inputformat.protobuf.KafkaConfluentSchemaRegistryProtoBufMessageDecoder":
        f"Protobuf through a schema registry is not supported; use {PINOT_PROTOBUF} with a descriptor file",
    "org.apache.pinot.plugin.inputformat.json.confluent.KafkaConfluentSchemaRegistryJsonMessageDecoder":
        f"JSON Schema through a schema registry is not supported; plain JSON messages take {PINOT_JSON}",
    "org.apache.pinot.plugin.inputformat.protobuf.ProtoBufCodeGenMessageDecoder":
        f"it needs compiled Java classes; use {PINOT_PROTOBUF} with a descriptor file",
}

MAX_INLINE_SCHEMA_BYTES = 1 << 20  # an Avro schema in a table config
MAX_REGISTRY_CACHE = 100_000  # cached.schema.map.capacity
MAX_CSV_COLUMNS = 10_000


class DecoderKind(str, enum.Enum):
    JSON = "json"
    AVRO = "avro"
    AVRO_REGISTRY = "avro-registry"
    PROTOBUF = "protobuf"
    CSV = "csv"


_CLASSES = {
    PINOT_JSON: DecoderKind.JSON,
    PINOT_JSON_INPUTFORMAT: DecoderKind.JSON,
    PINOT_JSON_LEGACY: DecoderKind.JSON,
    PINOT_AVRO: DecoderKind.AVRO,
    PINOT_AVRO_REGISTRY: DecoderKind.AVRO_REGISTRY,
    PINOT_PROTOBUF: DecoderKind.PROTOBUF,
    PINOT_CSV: DecoderKind.CSV,
}


@dataclass(frozen=True)
class AvroOptions:
    """SimpleAvroMessageDecoder: the writer schema (JSON text) every message is written with."""

    schema: str
    logical_types: bool = True  # Pinot's SimpleAvroMessageDecoder applies Avro logical types


@dataclass(frozen=True)
class RegistryOptions:
    """KafkaConfluentSchemaRegistryAvroMessageDecoder: where the schemas are, and the registry client's settings
    (confluent-kafka's SchemaRegistryClient names: ssl.ca.location, basic.auth.user.info, ...)."""

    url: str
    cache_capacity: int = 1000
    # Secrets among them: never shown (repr) and never logged.
    client_settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    logical_types: bool = False  # Pinot's confluent decoder applies them only with enableLogicalTypes=true


@dataclass(frozen=True)
class ProtobufOptions:
    """ProtoBufMessageDecoder: a FileDescriptorSet file (``protoc --include_imports --descriptor_set_out``) and the
    message type; None means the first message type of the set."""

    descriptor_file: str
    message_type: str | None = None


@dataclass(frozen=True)
class CsvOptions:
    """CSVMessageDecoder, resolved against its ``fileFormat`` preset. ``header`` None: each message starts with
    its own header line (Pinot's behaviour without the ``header`` prop)."""

    delimiter: str = ","
    header: tuple[str, ...] | None = None
    skip_header: bool = False
    multi_value_delimiter: str = ";"
    null_string: str | None = None
    comment_marker: str | None = None
    escape_character: str | None = None
    quote_character: str | None = '"'
    ignore_empty_lines: bool = True
    ignore_surrounding_spaces: bool = False


@dataclass(frozen=True)
class DecoderSpec:
    """What decodes a table's messages: the kind, Pinot's class name as configured, and the kind's options."""

    kind: DecoderKind = DecoderKind.JSON
    class_name: str = PINOT_JSON
    options: AvroOptions | RegistryOptions | ProtobufOptions | CsvOptions | None = None


JSON_DECODER = DecoderSpec()

# (fileFormat) -> the preset's delimiter, quote, escape, null string, ignoreEmptyLines, ignoreSurroundingSpaces:
# commons-csv's CSVFormat constants, which Pinot's CSVMessageDecoder starts from.
_CSV_FORMATS: dict[str, dict[str, Any]] = {
    "DEFAULT": {},
    "RFC4180": {"ignore_empty_lines": False},
    "EXCEL": {"ignore_empty_lines": False},
    "TDF": {"delimiter": "\t", "ignore_surrounding_spaces": True},
    "MYSQL": {"delimiter": "\t", "quote_character": None, "escape_character": "\\", "null_string": "\\N",
              "ignore_empty_lines": False},
}
_CSV_CHARS = {"delimiter": "delimiter", "multiValueDelimiter": "multi_value_delimiter",
              "commentMarker": "comment_marker", "escapeCharacter": "escape_character",
              "quoteCharacter": "quote_character"}
_CSV_FLAGS = {"skipHeader": "skip_header", "ignoreEmptyLines": "ignore_empty_lines",
              "ignoreSurroundingSpaces": "ignore_surrounding_spaces"}
_CSV_WRITER_ONLY = ("quoteMode", "recordSeparator")

# ``format``: Pinot's decoders never read it, yet Pinot's own examples set it ("JSON"); checked against the decoder
_FORMAT = "format"
_FORMATS = {DecoderKind.JSON: {"JSON"}, DecoderKind.AVRO: {"AVRO"}, DecoderKind.AVRO_REGISTRY: {"AVRO"},
            DecoderKind.PROTOBUF: {"PROTOBUF", "PROTO"}, DecoderKind.CSV: {"CSV"}}
_LOGICAL_TYPES = "enableLogicalTypes"
_REGISTRY_URL = "schema.registry.rest.url"
_REGISTRY_SSL = "schema.registry.ssl."
_REGISTRY_KEYS = {_REGISTRY_URL, "cached.schema.map.capacity", "basic.auth.credentials.source", "basic.auth.user.info",
                  "schema.registry.basic.auth.user.info", _LOGICAL_TYPES}
_REGISTRY_SSL_KEYS = {"truststore.location", "truststore.type", "truststore.password", "keystore.location",
                      "keystore.type", "keystore.password", "key.password"}


def parse_decoder(props: Mapping[str, str], stream_type: str, at: Callable[[str], str],
                  issues: list[ConfigIssue]) -> DecoderSpec | None:
    """The decoder the ``streamConfigs`` map ``props`` asks for (JSON when it names none); None, with issues, when
    it cannot be built. ``at(key)`` is the JSON path of a key of the map."""
    class_key = f"stream.{stream_type}.decoder.class.name"
    prefix = f"stream.{stream_type}.decoder.prop."
    given = {key[len(prefix):]: str(value) for key, value in props.items() if key.startswith(prefix)}
    before = len(issues)

    def issue(name: str, message: str) -> None:
        issues.append(ConfigIssue(at(prefix + name), message))

    raw_class = props.get(class_key)
    class_name = PINOT_JSON if raw_class is None else str(raw_class).strip()
    kind = _CLASSES.get(class_name)
    if kind is None:
        reason = _REFUSED_CLASSES.get(class_name)
        if reason is None:
            supported = ", ".join(sorted(_CLASSES))
            reason = f"not a decoder Cuvee runs (supported: {supported})"
        issues.append(ConfigIssue(at(class_key), f"{class_name!r}: {reason}"))
        return None
    declared = given.pop(_FORMAT, None)
    if declared is not None and declared.strip().upper() not in _FORMATS[kind]:
        issue(_FORMAT, f"{declared!r} does not match the decoder, which reads {sorted(_FORMATS[kind])[0]}")
    options: AvroOptions | RegistryOptions | ProtobufOptions | CsvOptions | None = None
    if kind is DecoderKind.JSON:
        for name in sorted(given):
            issue(name, "JSON messages take no decoder props")
    elif kind is DecoderKind.AVRO:
        options = _avro(given, issue)
    elif kind is DecoderKind.AVRO_REGISTRY:
        options = _registry(given, issue)
    elif kind is DecoderKind.PROTOBUF:
        options = _protobuf(given, issue)
    else:
        options = _csv(given, issue)
    if len(issues) > before:
        return None
    return DecoderSpec(kind=kind, class_name=class_name, options=options)


Report = Callable[[str, str], None]


def _unknown(given: Mapping[str, str], known: set[str] | tuple[str, ...], issue: Report) -> None:
    for name in sorted(set(given) - set(known)):
        issue(name, f"not a prop of this decoder (known: {', '.join(sorted(known))})")


def _flag(given: Mapping[str, str], name: str, default: bool, issue: Report) -> bool:
    raw = given.get(name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in ("true", "false"):
        issue(name, "must be true or false")
        return default
    return text == "true"


def _avro(given: Mapping[str, str], issue: Report) -> AvroOptions | None:
    _unknown(given, ("schema", _LOGICAL_TYPES, "recordExtractorClass"), issue)
    extractor = given.get("recordExtractorClass")
    if extractor is not None and extractor.strip() != PINOT_AVRO_EXTRACTOR:
        issue("recordExtractorClass", f"only Pinot's {PINOT_AVRO_EXTRACTOR} (the default) is supported")
    logical = _flag(given, _LOGICAL_TYPES, True, issue)
    text = given.get("schema")
    if text is None or not text.strip():
        issue("schema", "required: the Avro schema (JSON) the messages are written with")
        return None
    problem = avro_schema_problem(text)
    if problem is not None:
        issue("schema", problem)
        return None
    return AvroOptions(schema=text, logical_types=logical)


def avro_schema_problem(text: str) -> str | None:
    """Why ``text`` is not an Avro record schema Cuvee reads, None if it is (the limits of
    ``cuvee.config.avro_limits`` included)."""
    if len(text.encode()) > MAX_INLINE_SCHEMA_BYTES:
        return f"larger than {MAX_INLINE_SCHEMA_BYTES} bytes"
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "not JSON (an Avro schema is a JSON document nested at most 1024 levels)"
    import fastavro  # (a decoder's dependency: loaded only for tables that use Avro)

    named: dict[str, Any] = {}
    try:
        parsed = fastavro.parse_schema(doc, named_schemas=named)
    except Exception as exc:  # noqa: BLE001 - fastavro raises several types for a bad schema
        return f"not a valid Avro schema: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
    problem = record_problem(parsed)
    if problem is not None:
        return problem
    try:
        avro_shape(parsed, named)
    except AvroSchemaRefused as refused:
        return str(refused)
    return None


def _registry(given: Mapping[str, str], issue: Report) -> RegistryOptions | None:
    known = _REGISTRY_KEYS | {_REGISTRY_SSL + name for name in _REGISTRY_SSL_KEYS}
    _unknown(given, known, issue)
    logical = _flag(given, _LOGICAL_TYPES, False, issue)
    settings: dict[str, str] = {}
    url = (given.get(_REGISTRY_URL) or "").strip()
    if not url:
        issue(_REGISTRY_URL, "required: the Confluent Schema Registry's URL, e.g. http://registry:8081")
    for part in url.split(",") if url else []:
        parsed = urlsplit(part.strip())
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            issue(_REGISTRY_URL, "must be http:// or https:// URLs (comma-separated)")
            break
    capacity = 1000
    raw_capacity = given.get("cached.schema.map.capacity")
    if raw_capacity is not None:
        text = raw_capacity.strip()
        if not text.isdigit() or not 1 <= int(text) <= MAX_REGISTRY_CACHE:
            issue("cached.schema.map.capacity", f"must be an integer from 1 to {MAX_REGISTRY_CACHE}")
        else:
            capacity = int(text)
    _registry_auth(given, url, settings, issue)
    _registry_ssl(given, settings, issue)
    if not url:
        return None
    return RegistryOptions(url=url, cache_capacity=capacity, client_settings=tuple(sorted(settings.items())),
                           logical_types=logical)


def _registry_auth(given: Mapping[str, str], url: str, settings: dict[str, str], issue: Report) -> None:
    source = given.get("basic.auth.credentials.source")
    info_key = next((k for k in ("basic.auth.user.info", "schema.registry.basic.auth.user.info") if k in given), None)
    if "basic.auth.user.info" in given and "schema.registry.basic.auth.user.info" in given:
        issue("schema.registry.basic.auth.user.info", "conflicts with 'basic.auth.user.info'; give only one of them")
        return
    choice = None if source is None else source.strip().upper()
    if choice is not None and choice not in ("USER_INFO", "URL"):
        issue("basic.auth.credentials.source", "must be USER_INFO or URL (SASL_INHERIT is not supported)")
        return
    in_url = any(urlsplit(part.strip()).username for part in url.split(",")) if url else False
    if choice == "USER_INFO":
        info = given.get(info_key) if info_key else None
        if not info or ":" not in info or not info.split(":", 1)[0]:
            issue(info_key or "basic.auth.user.info", "required with basic.auth.credentials.source=USER_INFO, "
                                                      "as user:password")
            return
        if in_url:
            issue(_REGISTRY_URL, "holds credentials while basic.auth.credentials.source is USER_INFO; give them "
                                 "in one place")
            return
        settings["basic.auth.user.info"] = info
    elif info_key is not None:
        issue(info_key, "has no effect unless basic.auth.credentials.source is USER_INFO")
    elif choice == "URL" and not in_url:
        issue("basic.auth.credentials.source", f"URL: the credentials go in {_REGISTRY_URL} "
                                               "(http://user:password@host:port)")


def _registry_ssl(given: Mapping[str, str], settings: dict[str, str], issue: Report) -> None:
    """Java-style SSL keys of the registry client, for Python's ssl module: PEM files only."""
    for name, what in (("truststore", "trust store takes no password"),
                       ("keystore", "key store takes no store password (the key's is key.password)")):
        if given.get(f"{_REGISTRY_SSL}{name}.password") is not None:
            issue(f"{_REGISTRY_SSL}{name}.password", f"a PEM {what}; remove it")
    trust = _pem_file(given, "truststore", TRUSTSTORE_CONVERSION, issue)
    if trust is not None:
        settings["ssl.ca.location"] = trust
    store = _pem_file(given, "keystore", PEM_KEYSTORE_CONVERSION, issue)
    key_password = given.get(f"{_REGISTRY_SSL}key.password")
    if store is not None:
        settings["ssl.certificate.location"] = settings["ssl.key.location"] = store
        if key_password is not None:
            settings["ssl.key.password"] = key_password
    elif key_password is not None and f"{_REGISTRY_SSL}keystore.location" not in given:
        issue(f"{_REGISTRY_SSL}key.password", f"has no effect without {_REGISTRY_SSL}keystore.location")


def _pem_file(given: Mapping[str, str], store: str, conversion: str, issue: Report) -> str | None:
    """``schema.registry.ssl.<store>.location`` when its type is PEM (Python's ssl module reads nothing else)."""
    location_key, type_key = f"{_REGISTRY_SSL}{store}.location", f"{_REGISTRY_SSL}{store}.type"
    location, raw_type = given.get(location_key), given.get(type_key)
    if location is None:
        if raw_type is not None:
            issue(type_key, f"has no effect without {location_key}")
        return None
    kind = (raw_type or "JKS").strip().upper()
    if kind != "PEM":
        issue(type_key if raw_type else location_key,
              f"a {kind} {store.replace('store', ' store')} cannot be read by Python's ssl module: {conversion}")
        return None
    return location


def _protobuf(given: Mapping[str, str], issue: Report) -> ProtobufOptions | None:
    _unknown(given, ("descriptorFile", "protoClassName"), issue)
    path = (given.get("descriptorFile") or "").strip()
    message = (given.get("protoClassName") or "").strip() or None
    if message is not None and not all(part.isidentifier() for part in message.split(".")):
        issue("protoClassName", "must be a message type's name, e.g. my.package.Event")
    if not path:
        issue("descriptorFile", "required: the path of a descriptor set file on the servers "
                                "(protoc --include_imports --descriptor_set_out=...)")
        return None
    if path.startswith("file://"):
        path = path[len("file://"):]
    elif "://" in path or path.startswith("classpath:"):
        issue("descriptorFile", "must be a local file on the servers (an absolute path or a file:// URI)")
        return None
    if not path.startswith("/"):
        issue("descriptorFile", "must be an absolute path (servers start in different directories)")
        return None
    return ProtobufOptions(descriptor_file=path, message_type=message)


def _csv(given: Mapping[str, str], issue: Report) -> CsvOptions | None:
    known = ("fileFormat", "header", "nullStringValue", *_CSV_CHARS, *_CSV_FLAGS)
    for name in _CSV_WRITER_ONLY:
        if name in given:
            issue(name, "only changes how CSV is written, never how it is read; remove it")
    _unknown({k: v for k, v in given.items() if k not in _CSV_WRITER_ONLY}, known, issue)
    preset = (given.get("fileFormat") or "DEFAULT").strip().upper()
    if preset not in _CSV_FORMATS:
        issue("fileFormat", f"must be one of {', '.join(_CSV_FORMATS)}")
        return None
    values: dict[str, Any] = dict(_CSV_FORMATS[preset])
    for prop, attribute in _CSV_CHARS.items():
        raw = given.get(prop)
        if raw is None:
            continue
        if len(raw) != 1 or raw in "\r\n":
            issue(prop, "must be exactly one character (not a line break)")
            continue
        values[attribute] = raw
    for prop, attribute in _CSV_FLAGS.items():
        values[attribute] = _flag(given, prop, values.get(attribute, getattr(CsvOptions, attribute)), issue)
    if "nullStringValue" in given:
        values["null_string"] = given["nullStringValue"]
    delimiter = values.get("delimiter", CsvOptions.delimiter)
    if delimiter in (values.get("quote_character", CsvOptions.quote_character), values.get("escape_character")):
        issue("delimiter", "must differ from the quote and escape characters")
    raw_header = given.get("header")
    if raw_header is not None:
        names = tuple(name.strip() for name in raw_header.split(delimiter))
        if not all(names) or len(set(names)) != len(names):
            issue("header", f"must be distinct, non-empty column names separated by {delimiter!r}")
        elif len(names) > MAX_CSV_COLUMNS:
            issue("header", f"more than {MAX_CSV_COLUMNS} columns")
        values["header"] = names
    elif values.get("skip_header"):
        issue("skipHeader", "needs header (without it every message starts with its own header line)")
    return CsvOptions(**values)
