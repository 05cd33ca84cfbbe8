"""Table schemas in Pinot's JSON shape.

A schema names every column with its data type, role (dimension, metric, date-time), single- or multi-value,
and the value stored when a row has none (``defaultNullValue``). The JSON is Pinot's, so schemas written for
Pinot load unchanged and ours round-trip through ``to_json``.
"""

from __future__ import annotations

import copy
import enum
import json
import math
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from cuvee.config.datetime_format import DateTimeFormat, TimeFormatKind, parse_datetime_format, parse_granularity
from cuvee.config.errors import ConfigIssue, ConfigValidationError

# Pinot's built-in virtual columns, which every table answers (``cuvee.query.virtual_columns``): no column of a
# schema created or updated may be named like them (``cuvee.config.names``); a schema stored before they existed
# still loads, and its column wins over the virtual one.
VIRTUAL_COLUMN_NAMES = ("$docId", "$hostName", "$segmentName")


class DataType(str, enum.Enum):
    """Pinot's column data types."""

    INT = "INT"
    LONG = "LONG"
    FLOAT = "FLOAT"
    DOUBLE = "DOUBLE"
    BOOLEAN = "BOOLEAN"
    TIMESTAMP = "TIMESTAMP"
    STRING = "STRING"
    BYTES = "BYTES"
    JSON = "JSON"

    @property
    def is_numeric(self) -> bool:
        return self in _NUMERIC

    def arrow_type(self) -> pa.DataType:
        """The Arrow type a column of this data type is stored and queried as."""
        return _ARROW_TYPES[self]


_NUMERIC = {DataType.INT, DataType.LONG, DataType.FLOAT, DataType.DOUBLE, DataType.TIMESTAMP}
# Pinot's metric types: numbers to aggregate, or BYTES for serialized sketches (HLL, theta).
_METRIC_TYPES = {DataType.INT, DataType.LONG, DataType.FLOAT, DataType.DOUBLE, DataType.BYTES}
# Which data types each date-time format kind can be stored as.
_DATETIME_TYPES = {
    TimeFormatKind.EPOCH: {DataType.INT, DataType.LONG, DataType.TIMESTAMP},
    TimeFormatKind.SIMPLE_DATE_FORMAT: {DataType.STRING, DataType.INT, DataType.LONG},
    TimeFormatKind.TIMESTAMP: {DataType.TIMESTAMP, DataType.LONG},
}
_INT_RANGES = {DataType.INT: (-(2**31), 2**31 - 1), DataType.LONG: (-(2**63), 2**63 - 1),
               DataType.TIMESTAMP: (-(2**63), 2**63 - 1)}
# Field-spec keys we interpret; others are kept in ``extra`` and written back.
_FIELD_KEYS = {"name", "dataType", "singleValueField", "defaultNullValue", "format", "granularity", "maxLength",
               "maxLengthExceedStrategy"}
# Pinot's maxLength applies to these (STRING and JSON in characters, BYTES in bytes); what happens past it
_LENGTH_TYPES = ("STRING", "JSON", "BYTES")
LENGTH_STRATEGIES = ("TRIM_LENGTH", "SUBSTITUTE_DEFAULT_VALUE", "NO_ACTION")
_SCHEMA_KEYS = {"schemaName", "primaryKeyColumns", "dimensionFieldSpecs", "metricFieldSpecs", "dateTimeFieldSpecs"}

_ARROW_TYPES: dict[DataType, pa.DataType] = {
    DataType.INT: pa.int32(),
    DataType.LONG: pa.int64(),
    DataType.FLOAT: pa.float32(),
    DataType.DOUBLE: pa.float64(),
    DataType.BOOLEAN: pa.bool_(),
    DataType.TIMESTAMP: pa.timestamp("ms"),
    DataType.STRING: pa.string(),
    DataType.BYTES: pa.binary(),
    DataType.JSON: pa.string(),
}


class FieldRole(str, enum.Enum):
    """Which of Pinot's field-spec lists a column is declared in."""

    DIMENSION = "dimensionFieldSpecs"
    METRIC = "metricFieldSpecs"
    DATE_TIME = "dateTimeFieldSpecs"


# Pinot's defaults for a missing value: dimensions get a sentinel that sorts first, metrics get zero.
_DIMENSION_DEFAULTS: dict[DataType, Any] = {
    DataType.INT: -(2**31),
    DataType.LONG: -(2**63),
    DataType.FLOAT: -math.inf,
    DataType.DOUBLE: -math.inf,
    DataType.BOOLEAN: False,
    DataType.TIMESTAMP: 0,
    DataType.STRING: "null",
    DataType.BYTES: b"",
    DataType.JSON: "null",
}
_METRIC_DEFAULTS: dict[DataType, Any] = {
    DataType.INT: 0,
    DataType.LONG: 0,
    DataType.FLOAT: 0.0,
    DataType.DOUBLE: 0.0,
    DataType.BOOLEAN: False,
    DataType.TIMESTAMP: 0,
    DataType.STRING: "null",
    DataType.BYTES: b"",
    DataType.JSON: "null",
}


@dataclass(frozen=True)
class FieldSpec:
    """One column of a schema."""

    name: str
    data_type: DataType
    role: FieldRole
    single_value: bool = True
    default_null_value: Any = None
    # Date-time columns only: Pinot's format string (e.g. "1:MILLISECONDS:EPOCH") and granularity.
    format: str | None = None
    granularity: str | None = None
    # STRING, JSON and BYTES: Pinot's maxLength (characters for STRING and JSON, bytes for BYTES) and what a longer value
    # becomes at ingestion (``max_length_strategy``: TRIM_LENGTH, SUBSTITUTE_DEFAULT_VALUE or NO_ACTION). Cuvee
    # applies it only when the schema gives maxLength: Pinot's implicit 512-character cut is not made.
    max_length: int | None = None
    max_length_strategy: str | None = None
    # Keys of the field spec we do not interpret (e.g. "maxLength"), written back by to_json.
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def null_value(self) -> Any:
        """The value stored for a missing or null input (the configured default, else Pinot's)."""
        if self.default_null_value is not None:
            return self.default_null_value
        defaults = _METRIC_DEFAULTS if self.role is FieldRole.METRIC else _DIMENSION_DEFAULTS
        return defaults[self.data_type]

    @property
    def length_limit(self) -> int | None:
        """The length past which ``length_strategy`` applies: ``maxLength``, or Pinot's default 512 when only a
        strategy is given; None (no limit) when the schema gives neither."""
        if self.max_length is not None:
            return self.max_length
        return 512 if self.max_length_strategy is not None else None

    @property
    def length_strategy(self) -> str:
        """What a value longer than ``max_length`` becomes: the configured strategy, else Pinot's default
        (TRIM_LENGTH for STRING, NO_ACTION for JSON and BYTES)."""
        if self.max_length_strategy is not None:
            return self.max_length_strategy
        return "TRIM_LENGTH" if self.data_type is DataType.STRING else "NO_ACTION"

    @property
    def time_format(self) -> DateTimeFormat | None:
        """The parsed ``format`` of a date-time column (None for other columns)."""
        if self.role is not FieldRole.DATE_TIME or self.format is None:
            return None
        return parse_datetime_format(self.format)

    def arrow_type(self) -> pa.DataType:
        base = self.data_type.arrow_type()
        return base if self.single_value else pa.list_(base)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**copy.deepcopy(self.extra), "name": self.name, "dataType": self.data_type.value}
        if not self.single_value:
            out["singleValueField"] = False
        if self.default_null_value is not None:
            value = self.default_null_value
            # Pinot writes a BYTES default as hex.
            out["defaultNullValue"] = value.hex() if isinstance(value, bytes) else value
        if self.format is not None:
            out["format"] = self.format
        if self.granularity is not None:
            out["granularity"] = self.granularity
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        if self.max_length_strategy is not None:
            out["maxLengthExceedStrategy"] = self.max_length_strategy
        return out


@dataclass(frozen=True)
class Schema:
    """A table schema: ordered columns plus the primary key (upsert tables)."""

    name: str
    fields: tuple[FieldSpec, ...]
    primary_key_columns: tuple[str, ...] = ()
    # Top-level keys we do not interpret (e.g. "enableColumnBasedNullHandling"), written back by to_json.
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    _by_name: dict[str, FieldSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {f.name: f for f in self.fields})

    @property
    def column_names(self) -> list[str]:
        return [f.name for f in self.fields]

    def has_column(self, name: str) -> bool:
        return name in self._by_name

    def column(self, name: str) -> FieldSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"schema {self.name!r} has no column {name!r}") from None

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of this table's rows, in declaration order; every column nullable."""
        return pa.schema([pa.field(f.name, f.arrow_type()) for f in self.fields])

    @classmethod
    def from_json(cls, doc: Any) -> Schema:
        """Parse Pinot's schema JSON; raises ConfigValidationError listing every problem with its JSON path."""
        issues: list[ConfigIssue] = []
        if not isinstance(doc, dict):
            raise ConfigValidationError("schema", [ConfigIssue("$", "a schema must be a JSON object")])
        name = doc.get("schemaName")
        if not isinstance(name, str) or not name:
            issues.append(ConfigIssue("$.schemaName", "required, a non-empty string"))
            name = ""
        legacy_time = _legacy_time_spec(doc.get("timeFieldSpec"), issues) if "timeFieldSpec" in doc else None
        fields: list[FieldSpec] = []
        seen: set[str] = set()
        for role in FieldRole:
            specs = doc.get(role.value, [])
            if role is FieldRole.DATE_TIME and legacy_time is not None and isinstance(specs, list):
                specs = [*specs, legacy_time]
            if not isinstance(specs, list):
                issues.append(ConfigIssue(f"$.{role.value}", "must be a list"))
                continue
            for i, spec in enumerate(specs):
                parsed = _parse_field(spec, role, f"$.{role.value}[{i}]", issues)
                if parsed is None:
                    continue
                if parsed.name in seen:
                    issues.append(ConfigIssue(f"$.{role.value}[{i}].name", f"duplicate column {parsed.name!r}"))
                    continue
                seen.add(parsed.name)
                fields.append(parsed)
        if not fields and not issues:
            issues.append(ConfigIssue("$", "a schema needs at least one column"))
        pk = doc.get("primaryKeyColumns") or []
        if not isinstance(pk, list) or not all(isinstance(c, str) for c in pk):
            issues.append(ConfigIssue("$.primaryKeyColumns", "must be a list of column names"))
            pk = []
        by_name = {f.name: f for f in fields}
        for i, col in enumerate(pk):
            path = f"$.primaryKeyColumns[{i}]"
            if col in pk[:i]:
                issues.append(ConfigIssue(path, f"column {col!r} is listed twice"))
            elif col not in by_name:
                if fields:
                    issues.append(ConfigIssue(path, f"unknown column {col!r}"))
            elif not by_name[col].single_value:
                issues.append(ConfigIssue(path, f"column {col!r} is multi-valued; a primary key column must not be"))
        if issues:
            raise ConfigValidationError(f"schema {name!r}" if name else "schema", issues)
        extra = {k: copy.deepcopy(v) for k, v in doc.items() if k not in _SCHEMA_KEYS and k != "timeFieldSpec"}
        return cls(name=name, fields=tuple(fields), primary_key_columns=tuple(pk), extra=extra)

    def to_json(self) -> dict[str, Any]:
        """Pinot's current form (a legacy ``timeFieldSpec`` comes back as the date-time column it was read as)."""
        out: dict[str, Any] = {**copy.deepcopy(self.extra), "schemaName": self.name}
        for role in FieldRole:
            specs = [f.to_json() for f in self.fields if f.role is role]
            if specs:
                out[role.value] = specs
        if self.primary_key_columns:
            out["primaryKeyColumns"] = list(self.primary_key_columns)
        return out


def _parse_field(spec: Any, role: FieldRole, path: str, issues: list[ConfigIssue]) -> FieldSpec | None:
    if not isinstance(spec, dict):
        issues.append(ConfigIssue(path, "a field spec must be a JSON object"))
        return None
    ok = True
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        issues.append(ConfigIssue(f"{path}.name", "required, a non-empty string"))
        ok = False
    raw_type = spec.get("dataType")
    try:
        data_type = DataType(raw_type)
    except ValueError:
        allowed = ", ".join(t.value for t in DataType)
        issues.append(ConfigIssue(f"{path}.dataType", f"{raw_type!r} is not one of {allowed}"))
        ok = False
    single = spec.get("singleValueField", True)
    if not isinstance(single, bool):
        issues.append(ConfigIssue(f"{path}.singleValueField", "must be true or false"))
        ok = False
    if not ok:
        return None
    if role is FieldRole.METRIC and data_type not in _METRIC_TYPES:
        allowed = ", ".join(t.value for t in DataType if t in _METRIC_TYPES)
        issues.append(ConfigIssue(f"{path}.dataType", f"a metric must be one of {allowed}, not {data_type.value}"))
        return None
    if role in (FieldRole.METRIC, FieldRole.DATE_TIME) and not single:
        what = "a metric" if role is FieldRole.METRIC else "a date-time column"
        issues.append(ConfigIssue(f"{path}.singleValueField", f"{what} must be single-valued"))
        return None
    if "transformFunction" in spec:
        issues.append(ConfigIssue(f"{path}.transformFunction", "field-level transforms are not supported; "
                                  "use the table's ingestionConfig.transformConfigs"))
        return None
    default = spec.get("defaultNullValue")
    if default is not None:
        default = _coerce_default(default, data_type, f"{path}.defaultNullValue", issues)
    fmt = spec.get("format")
    gran = spec.get("granularity")
    if role is FieldRole.DATE_TIME:
        if fmt is None and data_type in (DataType.LONG, DataType.TIMESTAMP):
            fmt = "1:MILLISECONDS:EPOCH"
        if not _datetime_ok(fmt, gran, data_type, path, issues):
            return None
    max_length, strategy = _max_length(spec, data_type, path, issues)
    extra = {k: copy.deepcopy(v) for k, v in spec.items() if k not in _FIELD_KEYS}
    return FieldSpec(
        name=name,
        data_type=data_type,
        role=role,
        single_value=single,
        default_null_value=default,
        format=fmt,
        granularity=gran,
        max_length=max_length,
        max_length_strategy=strategy,
        extra=extra,
    )


def _max_length(spec: dict[str, Any], data_type: DataType, path: str, issues: list[ConfigIssue]
                ) -> tuple[int | None, str | None]:
    """Pinot's ``maxLength`` and ``maxLengthExceedStrategy`` of a field, checked."""
    raw, strategy = spec.get("maxLength"), spec.get("maxLengthExceedStrategy")
    if raw is None and strategy is None:
        return None, None
    if data_type.value not in _LENGTH_TYPES:
        issues.append(ConfigIssue(f"{path}.maxLength" if raw is not None else f"{path}.maxLengthExceedStrategy",
                                  f"applies to {', '.join(_LENGTH_TYPES)} columns, not {data_type.value}"))
        return None, None
    length = None
    if raw is not None:
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            issues.append(ConfigIssue(f"{path}.maxLength", "must be a positive integer"))
        else:
            length = raw
    if strategy is not None:
        if not isinstance(strategy, str) or strategy.upper() not in (*LENGTH_STRATEGIES, "ERROR"):
            issues.append(ConfigIssue(f"{path}.maxLengthExceedStrategy",
                                      f"{strategy!r} is not one of {', '.join(LENGTH_STRATEGIES)}, ERROR"))
            strategy = None
        elif strategy.upper() == "ERROR":
            issues.append(ConfigIssue(f"{path}.maxLengthExceedStrategy", "ERROR (failing the row) is not supported "
                                      f"yet; use one of {', '.join(LENGTH_STRATEGIES)}"))
            strategy = None
        else:
            strategy = strategy.upper()
    return length, strategy


def _datetime_ok(fmt: Any, gran: Any, data_type: DataType, path: str, issues: list[ConfigIssue]) -> bool:
    """A date-time column needs a format that its data type can hold, and a well-formed granularity if given."""
    ok = True
    if fmt is None:
        issues.append(ConfigIssue(f"{path}.format", f"required for a {data_type.value} date-time column, "
                                                    "e.g. '1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd' or '1:SECONDS:EPOCH'"))
        ok = False
    else:
        try:
            parsed = parse_datetime_format(fmt)
        except ValueError as e:
            issues.append(ConfigIssue(f"{path}.format", str(e)))
            ok = False
        else:
            if data_type not in _DATETIME_TYPES[parsed.kind]:
                allowed = ", ".join(t.value for t in DataType if t in _DATETIME_TYPES[parsed.kind])
                issues.append(ConfigIssue(f"{path}.format", f"a {parsed.kind.value} format needs dataType "
                                                            f"{allowed}, not {data_type.value}"))
                ok = False
    if gran is not None:
        try:
            parse_granularity(gran)
        except ValueError as e:
            issues.append(ConfigIssue(f"{path}.granularity", str(e)))
            ok = False
    return ok


def _coerce_default(value: Any, data_type: DataType, path: str, issues: list[ConfigIssue]) -> Any:
    """Pinot accepts defaultNullValue as a JSON string or number; convert it to the column's type."""
    try:
        if data_type in _INT_RANGES:
            number = _to_int(value)
            low, high = _INT_RANGES[data_type]
            if not low <= number <= high:
                raise ValueError("out of range")
            return number
        if data_type in (DataType.FLOAT, DataType.DOUBLE):
            if isinstance(value, bool):
                raise ValueError("not a number")
            return float(value)
        if data_type is DataType.BOOLEAN:
            return _to_bool(value)
        if data_type is DataType.BYTES:
            if not isinstance(value, str):
                raise TypeError("BYTES defaults are hex strings")
            return bytes.fromhex(value)
        if data_type is DataType.JSON and not isinstance(value, str):
            return json.dumps(value, separators=(",", ":"))
        return value if isinstance(value, str) else json.dumps(value)
    except (TypeError, ValueError):
        hint = " (a hex string)" if data_type is DataType.BYTES else ""
        issues.append(ConfigIssue(path, f"{value!r} is not a valid {data_type.value}{hint}"))
        return None


def _to_int(value: Any) -> int:
    """Whole numbers only: 7, 7.0 and "7" are fine, 7.5 and true are not."""
    if isinstance(value, bool):
        raise ValueError("not an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("not an integer")
        return int(value)
    return int(value)


def _to_bool(value: Any) -> bool:
    """Pinot stores BOOLEAN as 0/1 and accepts true/false or 1/0."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise ValueError("not a boolean")


def _legacy_time_spec(spec: Any, issues: list[ConfigIssue]) -> dict[str, Any] | None:
    """Pinot's deprecated ``timeFieldSpec`` as the ``dateTimeFieldSpecs`` entry Pinot itself converts it to:
    ``{incomingGranularitySpec: {name, dataType, timeType, timeUnitSize, timeFormat}}`` becomes a column of format
    ``<size>:<timeType>:EPOCH`` (or ``…:SIMPLE_DATE_FORMAT:<pattern>``) and the same granularity. An
    ``outgoingGranularitySpec`` that differs would need the rows converted at ingestion: refused, with the way."""
    at = "$.timeFieldSpec"
    if not isinstance(spec, dict) or not isinstance(spec.get("incomingGranularitySpec"), dict):
        issues.append(ConfigIssue(at, "must be an object with an incomingGranularitySpec"))
        return None
    incoming = spec["incomingGranularitySpec"]
    outgoing = spec.get("outgoingGranularitySpec")
    if outgoing is not None and outgoing != incoming:
        issues.append(ConfigIssue(f"{at}.outgoingGranularitySpec", "a time column converted at ingestion is not "
                                  "supported; declare the outgoing column in dateTimeFieldSpecs and convert it with "
                                  "an ingestion transform (ingestionConfig.transformConfigs)"))
        return None
    name, data_type = incoming.get("name"), incoming.get("dataType")
    unit, size = incoming.get("timeType"), incoming.get("timeUnitSize", 1)
    time_format = incoming.get("timeFormat", "EPOCH")
    if not isinstance(unit, str) or not isinstance(size, int) or isinstance(size, bool) or not isinstance(
            time_format, str):
        issues.append(ConfigIssue(f"{at}.incomingGranularitySpec", "needs timeType (e.g. MILLISECONDS), an integer "
                                  "timeUnitSize and a timeFormat (EPOCH or SIMPLE_DATE_FORMAT:<pattern>)"))
        return None
    return {"name": name, "dataType": data_type, "format": f"{size}:{unit}:{time_format}",
            "granularity": f"{size}:{unit}"}
