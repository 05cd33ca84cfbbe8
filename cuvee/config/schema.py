"""Table schemas in Pinot's JSON shape.

A schema names every column with its data type, role (dimension, metric, date-time), single- or multi-value,
and the value stored when a row has none (``defaultNullValue``). The JSON is Pinot's, so schemas written for
Pinot load unchanged and ours round-trip through ``to_json``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from cuvee.config.errors import ConfigIssue, ConfigValidationError


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

    @property
    def null_value(self) -> Any:
        """The value stored for a missing or null input (the configured default, else Pinot's)."""
        if self.default_null_value is not None:
            return self.default_null_value
        defaults = _METRIC_DEFAULTS if self.role is FieldRole.METRIC else _DIMENSION_DEFAULTS
        return defaults[self.data_type]

    def arrow_type(self) -> pa.DataType:
        base = self.data_type.arrow_type()
        return base if self.single_value else pa.list_(base)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "dataType": self.data_type.value}
        if not self.single_value:
            out["singleValueField"] = False
        if self.default_null_value is not None:
            value = self.default_null_value
            out["defaultNullValue"] = value.decode("latin-1") if isinstance(value, bytes) else value
        if self.format is not None:
            out["format"] = self.format
        if self.granularity is not None:
            out["granularity"] = self.granularity
        return out


@dataclass(frozen=True)
class Schema:
    """A table schema: ordered columns plus the primary key (upsert tables)."""

    name: str
    fields: tuple[FieldSpec, ...]
    primary_key_columns: tuple[str, ...] = ()
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
        fields: list[FieldSpec] = []
        seen: set[str] = set()
        for role in FieldRole:
            specs = doc.get(role.value, [])
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
        for i, col in enumerate(pk):
            if col not in seen and fields:
                issues.append(ConfigIssue(f"$.primaryKeyColumns[{i}]", f"unknown column {col!r}"))
        if issues:
            raise ConfigValidationError(f"schema {name!r}" if name else "schema", issues)
        return cls(name=name, fields=tuple(fields), primary_key_columns=tuple(pk))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schemaName": self.name}
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
    if role is FieldRole.METRIC and not (data_type.is_numeric or data_type is DataType.BYTES):
        issues.append(ConfigIssue(f"{path}.dataType", f"a metric must be numeric, not {data_type.value}"))
        return None
    if role is FieldRole.METRIC and not single:
        issues.append(ConfigIssue(f"{path}.singleValueField", "a metric must be single-valued"))
        return None
    default = spec.get("defaultNullValue")
    if default is not None:
        default = _coerce_default(default, data_type, f"{path}.defaultNullValue", issues)
    fmt = spec.get("format")
    gran = spec.get("granularity")
    if role is FieldRole.DATE_TIME and fmt is None:
        fmt = "1:MILLISECONDS:EPOCH" if data_type in (DataType.LONG, DataType.TIMESTAMP) else None
    return FieldSpec(
        name=name,
        data_type=data_type,
        role=role,
        single_value=single,
        default_null_value=default,
        format=fmt,
        granularity=gran,
    )


def _coerce_default(value: Any, data_type: DataType, path: str, issues: list[ConfigIssue]) -> Any:
    """Pinot accepts defaultNullValue as a JSON string or number; convert it to the column's type."""
    try:
        if data_type in (DataType.INT, DataType.LONG, DataType.TIMESTAMP):
            return int(value)
        if data_type in (DataType.FLOAT, DataType.DOUBLE):
            return float(value)
        if data_type is DataType.BOOLEAN:
            if isinstance(value, str):
                return value.strip().lower() in ("true", "1")
            return bool(value)
        if data_type is DataType.BYTES:
            return bytes.fromhex(value) if isinstance(value, str) else bytes(value)
        return str(value)
    except (TypeError, ValueError):
        issues.append(ConfigIssue(path, f"{value!r} is not a valid {data_type.value}"))
        return None
