"""What reading one Avro message may cost, decided from its writer schema before any message is read (pure).

fastavro reads a message recursively in C and builds a Python value for everything it reads. Three kinds of
schema would let one small message take a server down or make it build without bound:

- values nested deeper than the C stack holds: a recursive type (a linked list, a tree) nests as deep as the
  message says, and fastavro overflows the stack (SIGSEGV: the process dies, and dies again on restart, reading
  the same offset) at about 5,000 levels with an 8 MiB stack;
- an array whose items take no bytes (null, a record of such fields, fixed of size 0): a count of a few bytes
  claims billions of items, each built in turn;
- a named type used several times inside another: each use is read (and built) again, so 30 levels of a record
  holding two fields of the next level build 2^30 records out of one byte.

The limits (docs/configuration.md, "Decoders"):

- ``MAX_AVRO_DEPTH``: values (records, arrays, maps) nested in a message, the record itself being level 1. A
  schema that is not recursive and nests deeper is refused; a message of a recursive schema is walked first
  (iteratively, by ``cuvee.decode.avro``) and is a bad record when it nests deeper. fastavro's reader takes about
  2 KiB of stack a level: it survived 22 times this depth on an 8 MiB stack, and this depth on 512 KiB.
- ``MAX_AVRO_ITEM_VALUES``: the values that take no bytes of their own (records, nulls, fixed of size 0) one
  array item, map value or union branch builds before its own bytes are read, for those that can occur many
  times in a message (inside an array, a map or a recursive type).
- ``MAX_AVRO_RECORD_VALUES``: the same for the rest of the record (read once per message).

With them, a message of ``n`` bytes builds at most ``MAX_AVRO_RECORD_VALUES + (2 * MAX_AVRO_ITEM_VALUES + 1) * n``
values (``value_bound``): every value is either read from at least one byte of its own (at most ``n``), or part of
the record's own part, or part of an item or branch, each of which is entered on a byte of its own (an item
takes at least one byte; a branch its index) that at most one other item also counts.

Names are resolved by fastavro (``parse_schema``), so a type is found whatever name it is referred to by (its
full name, or its short name inside its namespace). Every walk here is iterative: a schema nested as deep as
JSON allows is reported, never a RecursionError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_AVRO_DEPTH = 200
MAX_AVRO_ITEM_VALUES = 8
MAX_AVRO_RECORD_VALUES = 10_000

# Node kinds of a compiled schema. VARINT: int, long, enum (a zig-zag varint); BYTES: bytes, string (a varint
# length, then that many bytes); FIXED: ``size`` bytes.
NULL, BOOLEAN, VARINT, FLOAT, DOUBLE, BYTES, FIXED, RECORD, ARRAY, MAP, UNION = range(11)
_PRIMITIVES = {"null": NULL, "boolean": BOOLEAN, "int": VARINT, "long": VARINT, "float": FLOAT, "double": DOUBLE,
               "bytes": BYTES, "string": BYTES}
_NAMED = ("record", "error", "enum", "fixed")


class AvroSchemaRefused(ValueError):
    """A schema whose messages could cost more than the limits allow; the text says why."""


@dataclass(frozen=True)
class AvroShape:
    """A schema as a graph of nodes (``root`` is its top type): ``kinds[i]``, ``children[i]`` (a record's fields
    in order, a union's branches, an array's items, a map's values), ``sizes[i]`` (fixed). ``recursive``: some
    type holds itself, so only a walk of each message can tell how deep it nests."""

    kinds: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]
    sizes: tuple[int, ...]
    names: tuple[str | None, ...]
    root: int
    recursive: bool
    record_values: int  # values that take no bytes in the part read once (at most MAX_AVRO_RECORD_VALUES)
    item_values: int  # the most in one item, map value or repeated branch (at most MAX_AVRO_ITEM_VALUES)


def value_bound(shape: AvroShape, message_bytes: int) -> int:
    """The most values fastavro builds reading a message of ``message_bytes`` bytes of ``shape``."""
    return shape.record_values + (2 * shape.item_values + 1) * message_bytes


def avro_shape(parsed: Any, named: Mapping[str, Any]) -> AvroShape:
    """The shape of a schema fastavro parsed (``fastavro.parse_schema(doc, named_schemas=named)``);
    AvroSchemaRefused when its messages could cost more than the limits allow."""
    kinds, children, sizes, names, root = _compile(parsed, named)
    count = len(kinds)
    parents: list[list[int]] = [[] for _ in range(count)]
    for node, below in enumerate(children):
        for child in dict.fromkeys(below):  # each parent once; a record counts a field type used twice itself
            parents[child].append(node)
    _no_infinite_type(kinds, children, names, parents)
    zero = _zero_width(kinds, children, sizes, parents)
    for node, kind in enumerate(kinds):
        if kind == ARRAY and zero[children[node][0]]:
            raise AvroSchemaRefused("an array whose items take no bytes (null, an empty record, fixed of size 0) "
                                    "is not supported: a few bytes could claim billions of items")
    cyclic = _cyclic(children)
    recursive = any(cyclic)
    if not recursive:
        depth = _depth(kinds, children, root)
        if depth > MAX_AVRO_DEPTH:
            raise AvroSchemaRefused(f"values nested {depth} levels deep (records, arrays, maps); at most "
                                    f"{MAX_AVRO_DEPTH} are supported")
    region = _region_values(kinds, children, sizes)
    repeated = _repeated(kinds, children, cyclic)
    item_values, item_at = 0, None
    for node, kind in enumerate(kinds):
        if kind in (ARRAY, MAP) or (kind == UNION and repeated[node]):
            for child in children[node]:
                if region[child] > item_values:
                    item_values, item_at = region[child], child
    if item_values > MAX_AVRO_ITEM_VALUES:
        what = f" ({names[item_at]})" if item_at is not None and names[item_at] else ""
        raise AvroSchemaRefused(
            f"an array item, map value or union branch{what} builds {_count(item_values)} values that take no bytes "
            f"of their own (records, nulls, fixed of size 0; each use of a named type counts); at most "
            f"{MAX_AVRO_ITEM_VALUES} are supported where a message can hold many of them")
    record_values = _once_values(kinds, children, root, region, repeated)
    if record_values > MAX_AVRO_RECORD_VALUES:
        raise AvroSchemaRefused(
            f"the record builds {_count(record_values)} values that take no bytes of their own (records, nulls, "
            f"fixed of size 0; each use of a named type counts); at most {MAX_AVRO_RECORD_VALUES} are supported")
    return AvroShape(tuple(kinds), tuple(children), tuple(sizes), tuple(names), root, recursive, record_values,
                     item_values)


def record_problem(parsed: Any) -> str | None:
    """Why a parsed schema's messages are not rows (each message must be one record), None if they are."""
    node = parsed
    while isinstance(node, dict) and not isinstance(node.get("type"), str):
        node = node.get("type")
    if isinstance(node, dict) and node.get("type") in ("record", "error"):
        return None
    kind = node if isinstance(node, str) else "union" if isinstance(node, list) else \
        node.get("type") if isinstance(node, dict) else type(node).__name__
    return f"must be an Avro record schema (each message is one row), not {kind!r}"


_CAP = MAX_AVRO_RECORD_VALUES + 1  # counts saturate here (a schema can name 2^1000 values)


def _count(values: int) -> str:
    return f"more than {MAX_AVRO_RECORD_VALUES}" if values >= _CAP else str(values)


def _compile(parsed: Any, named: Mapping[str, Any]
             ) -> tuple[list[int], list[tuple[int, ...]], list[int], list[str | None], int]:
    kinds: list[int] = []
    children: list[tuple[int, ...]] = []
    sizes: list[int] = []
    names: list[str | None] = []
    by_name: dict[str, int] = {}
    leaves: dict[int, int] = {}
    pending: list[tuple[int, Any]] = []

    def new(kind: int, name: str | None = None) -> int:
        kinds.append(kind)
        children.append(())
        sizes.append(0)
        names.append(name)
        return len(kinds) - 1

    def node_id(node: Any) -> int:
        while isinstance(node, dict) and node.get("type") not in (*_NAMED, "array", "map"):
            node = node.get("type")  # {"type": "long", "logicalType": ...} and other wrappers
        if isinstance(node, str):
            primitive = _PRIMITIVES.get(node)
            if primitive is not None:
                if primitive not in leaves:
                    leaves[primitive] = new(primitive)
                return leaves[primitive]
            found = by_name.get(node)
            if found is not None:
                return found
            definition = named.get(node)
            if not isinstance(definition, dict):
                raise AvroSchemaRefused(f"unknown type {node!r}")
            found = by_name[node] = new(-1, node)
            pending.append((found, definition))
            return found
        if isinstance(node, list):
            found = new(UNION)
            pending.append((found, node))
            return found
        if isinstance(node, dict):
            name = node.get("name")
            if node["type"] in _NAMED and isinstance(name, str):
                if name in by_name:
                    return by_name[name]
                found = by_name[name] = new(-1, name)
            else:
                found = new(-1)
            pending.append((found, node))
            return found
        raise AvroSchemaRefused(f"not an Avro type: {str(node)[:80]!r}")

    root = node_id(parsed)
    while pending:
        found, node = pending.pop()
        if isinstance(node, list):
            children[found] = tuple(node_id(branch) for branch in node)
            continue
        kind = node["type"]
        if kind in ("record", "error"):
            kinds[found] = RECORD
            children[found] = tuple(node_id(field.get("type")) for field in node.get("fields") or ()
                                    if isinstance(field, dict))
        elif kind == "enum":
            kinds[found] = VARINT
        elif kind == "fixed":
            kinds[found], sizes[found] = FIXED, int(node.get("size") or 0)
        elif kind == "array":
            kinds[found], children[found] = ARRAY, (node_id(node.get("items")),)
        else:
            kinds[found], children[found] = MAP, (node_id(node.get("values")),)
    return kinds, children, sizes, names, root


def _no_infinite_type(kinds: list[int], children: list[tuple[int, ...]], names: list[str | None],
                      parents: list[list[int]]) -> None:
    """Refuses a type with no finite value (a record holding itself with no union, array or map in between):
    reading it would recurse without reading a byte. Least fixpoint: leaves, arrays and maps (empty) are finite;
    a record when all its fields are; a union when one branch is."""
    finite = [False] * len(kinds)
    waiting = [len(children[n]) if kinds[n] == RECORD else 1 for n in range(len(kinds))]
    ready = [n for n, kind in enumerate(kinds) if kind not in (RECORD, UNION) or (kind == RECORD and not children[n])]
    while ready:
        node = ready.pop()
        if finite[node]:
            continue
        finite[node] = True
        for parent in parents[node]:
            if finite[parent]:
                continue
            waiting[parent] -= children[parent].count(node) if kinds[parent] == RECORD else 1
            if waiting[parent] <= 0:
                ready.append(parent)
    if not all(finite):
        stuck = next((names[n] for n in range(len(kinds)) if not finite[n] and names[n]), None)
        raise AvroSchemaRefused(f"type {stuck or 'of the schema'!s} has no finite value: it holds itself with no "
                                "union, array or map in between")


def _zero_width(kinds: list[int], children: list[tuple[int, ...]], sizes: list[int],
                parents: list[list[int]]) -> list[bool]:
    """Which types take no bytes at all: null, fixed of size 0, records of only such fields."""
    zero = [False] * len(kinds)
    waiting = [len(children[n]) for n in range(len(kinds))]
    ready = [n for n, kind in enumerate(kinds)
             if kind == NULL or (kind == FIXED and sizes[n] == 0) or (kind == RECORD and not children[n])]
    while ready:
        node = ready.pop()
        if zero[node]:
            continue
        zero[node] = True
        for parent in parents[node]:
            if kinds[parent] == RECORD and not zero[parent]:
                waiting[parent] -= children[parent].count(node)
                if waiting[parent] <= 0:
                    ready.append(parent)
    return zero


def _cyclic(children: list[tuple[int, ...]]) -> list[bool]:
    """Which nodes are on a cycle (Tarjan's strongly connected components, iteratively)."""
    count = len(children)
    index = [-1] * count
    low = [0] * count
    on_stack = [False] * count
    stack: list[int] = []
    cyclic = [False] * count
    counter = 0
    for start in range(count):
        if index[start] != -1:
            continue
        work = [(start, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack[node] = True
            if position < len(children[node]):
                work.append((node, position + 1))
                child = children[node][position]
                if index[child] == -1:
                    work.append((child, 0))
                elif on_stack[child]:
                    low[node] = min(low[node], index[child])
                continue
            if work:  # returning to the parent
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1 or node in children[node]:
                    for member in members:
                        cyclic[member] = True
    return cyclic


def _post_order(children: list[tuple[int, ...]], start: int, follow: Any = None) -> list[int]:
    """The nodes reachable from ``start`` (through the children ``follow(node, child)`` allows), each after its
    children; the graph followed must be acyclic."""
    expanded: set[int] = set()
    order: list[int] = []
    work = [(start, False)]
    while work:
        node, finished = work.pop()
        if finished:
            order.append(node)
            continue
        if node in expanded:
            continue
        expanded.add(node)
        work.append((node, True))
        for child in children[node]:
            if child not in expanded and (follow is None or follow(node, child)):
                work.append((child, False))
    return order


def _depth(kinds: list[int], children: list[tuple[int, ...]], root: int) -> int:
    depth = [0] * len(kinds)
    for node in _post_order(children, root):
        below = max((depth[child] for child in children[node]), default=0)
        depth[node] = below + (1 if kinds[node] in (RECORD, ARRAY, MAP) else 0)
    return depth[root]


def _takes_no_own_byte(kind: int, size: int) -> bool:
    """Values read without a byte of their own: records (their fields read), nulls, fixed of size 0."""
    return kind in (RECORD, NULL) or (kind == FIXED and size == 0)


def _region_values(kinds: list[int], children: list[tuple[int, ...]], sizes: list[int]) -> list[int]:
    """Per node, the values built reading it before any byte of its own: itself and, for a record, the fields
    of that sort within (records hold no record-only cycles, so this is a walk of a DAG)."""
    region = [0] * len(kinds)
    done = [False] * len(kinds)
    for start in range(len(kinds)):
        if done[start] or not _takes_no_own_byte(kinds[start], sizes[start]):
            continue
        order = _post_order(children, start, lambda n, c: not done[c] and _takes_no_own_byte(kinds[c], sizes[c]))
        for node in order:
            total = 1
            if kinds[node] == RECORD:
                for child in children[node]:
                    if _takes_no_own_byte(kinds[child], sizes[child]):
                        total += region[child]
            region[node] = min(total, _CAP)
            done[node] = True
    return region


def _repeated(kinds: list[int], children: list[tuple[int, ...]], cyclic: list[bool]) -> list[bool]:
    """Nodes a message can hold many of: inside an array or a map, or inside a recursive type."""
    repeated = list(cyclic)
    work = [n for n in range(len(kinds)) if cyclic[n]]
    for node, kind in enumerate(kinds):
        if kind in (ARRAY, MAP):
            work.extend(children[node])
    while work:
        node = work.pop()
        if repeated[node] and not cyclic[node]:
            continue
        repeated[node] = True
        work.extend(child for child in children[node] if not repeated[child])
    return repeated


def _once_values(kinds: list[int], children: list[tuple[int, ...]], root: int, region: list[int],
                 repeated: list[bool]) -> int:
    """The values that take no bytes of their own in the part of a message read once: the record's fields
    outside arrays, maps and recursive types, a union counting its largest branch. A repeated node counts its own
    region (what is below its unions and items is counted per item)."""
    once = [0] * len(kinds)
    for node in _post_order(children, root, lambda n, c: not repeated[n]):
        kind = kinds[node]
        if repeated[node]:
            once[node] = region[node]
        elif kind == RECORD:
            once[node] = min(1 + sum(once[child] for child in children[node]), _CAP)
        elif kind == UNION:
            once[node] = max((once[child] for child in children[node]), default=0)
        else:
            once[node] = region[node]
    return once[root]
