"""Which schema updates existing segments can follow: Pinot's backward-compatibility rules, each problem named.

Segments built under the old schema stay as they are (a reload never rewrites them, ``cuvee.evolution.serving``),
so an update may only do what old segments can be read under:

- **adding columns** is allowed: old segments answer the new column's default null value;
- a column **removed** is refused (Pinot: every old column must be retained);
- per retained column (Pinot's ``FieldSpec.isBackwardCompatibleWith`` and ``SchemaDiff``): a **data type**
  change, a **single-/multi-value** change and a **field type** change (dimension, metric, date-time) are refused;
  a ``defaultNullValue`` change and keys such as ``maxLength`` are allowed (they apply to rows ingested from then
  on, and to the default a column added later answers in old segments);
- a **primary key** that existed and changes is refused (an upsert table's key maps were built on it); adding one
  to a schema that had none is allowed, as in Pinot.

One deliberate difference: Pinot lets a date-time column's ``format`` change (its ``FieldSpec`` check compares only
name, type and single-value); we refuse it, because the values already stored, the segments' recorded time range,
retention and the hybrid time boundary were all computed in the old format, and a new format would reinterpret
them. Its ``granularity`` may change (Pinot: it only describes the data).

Pure: two parsed schemas in, the differences out. ``PUT /schemas/{name}?force=true`` writes a refused update anyway
(Pinot's ``force``), after logging what it breaks.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuvee.config.errors import ConfigIssue
from cuvee.config.schema import FieldRole, FieldSpec, Schema

_ROLE_NAMES = {FieldRole.DIMENSION: "DIMENSION", FieldRole.METRIC: "METRIC", FieldRole.DATE_TIME: "DATE_TIME"}


@dataclass(frozen=True)
class SchemaDiff:
    """What an update changes: the columns it adds, and every change old segments cannot follow (as issues with
    the JSON path of the new schema where the column now is, or of the old one for a removed column)."""

    added: tuple[str, ...]
    incompatible: tuple[ConfigIssue, ...]

    @property
    def compatible(self) -> bool:
        return not self.incompatible


def diff_schemas(old: Schema, new: Schema) -> SchemaDiff:
    """Compare ``new`` with the stored ``old`` (see the module doc for the rules)."""
    issues: list[ConfigIssue] = []
    for spec in old.fields:
        if not new.has_column(spec.name):
            issues.append(ConfigIssue(f"$.{spec.role.value}", f"column {spec.name!r} ({_describe(spec)}) was removed; "
                                                              "a column cannot be removed from a schema in use"))
            continue
        issues.extend(_column_changes(spec, new.column(spec.name), _path(new, spec.name)))
    old_key, new_key = list(old.primary_key_columns), list(new.primary_key_columns)
    if old_key and old_key != new_key:
        issues.append(ConfigIssue("$.primaryKeyColumns", f"the primary key changed from {old_key} to {new_key}; "
                                                         "an existing primary key cannot change"))
    added = tuple(f.name for f in new.fields if not old.has_column(f.name))
    return SchemaDiff(added, tuple(issues))


def columns_differ(consumed: Schema, served: Schema) -> list[str]:
    """The columns whose name, data type, single/multi-value or field type (dimension, metric, date-time)
    differ between the schema a consuming segment is built under and the one served now, sorted: a reload
    force-commits the segment when there is any (its successor consumes under the served columns)."""

    def shapes(schema: Schema) -> dict[str, tuple[str, bool, FieldRole]]:
        return {f.name: (f.data_type.value, f.single_value, f.role) for f in schema.fields}

    a, b = shapes(consumed), shapes(served)
    return sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name))


def _column_changes(old: FieldSpec, new: FieldSpec, path: str) -> list[ConfigIssue]:
    name = repr(old.name)
    issues = []
    if old.role is not new.role:
        issues.append(ConfigIssue(path, f"column {name} changed field type from {_ROLE_NAMES[old.role]} to "
                                        f"{_ROLE_NAMES[new.role]}"))
    if old.data_type is not new.data_type:
        issues.append(ConfigIssue(f"{path}.dataType", f"column {name} changed data type from {old.data_type.value} "
                                                      f"to {new.data_type.value}"))
    if old.single_value != new.single_value:
        issues.append(ConfigIssue(f"{path}.singleValueField",
                                  f"column {name} changed from {_value_kind(old)} to {_value_kind(new)}"))
    if old.role is FieldRole.DATE_TIME and new.role is FieldRole.DATE_TIME and old.format != new.format:
        issues.append(ConfigIssue(f"{path}.format", f"date-time column {name} changed format from {old.format!r} "
                                                    f"to {new.format!r}; the values already stored would be read "
                                                    "in the new format"))
    return issues


def _path(schema: Schema, name: str) -> str:
    spec = schema.column(name)
    index = [f.name for f in schema.fields if f.role is spec.role].index(name)
    return f"$.{spec.role.value}[{index}]"


def _describe(spec: FieldSpec) -> str:
    return f"{_ROLE_NAMES[spec.role]} {spec.data_type.value}{'' if spec.single_value else ' multi-value'}"


def _value_kind(spec: FieldSpec) -> str:
    return "single-value" if spec.single_value else "multi-value"
