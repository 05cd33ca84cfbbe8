"""Pinot's string, JSON, hashing and math scalar functions where DuckDB lacks the name or reads it differently.

Pinot's meanings (its ``StringFunctions``, ``JsonFunctions``, ``ArithmeticFunctions``): ``strpos`` and ``substr``
count from 0 and answer -1 / use an exclusive end; ``concat(a, b, sep)`` takes the separator last; ``split`` and
``splitPart`` split on the whole delimiter and drop empty parts; ``lpad``/``rpad`` never shorten; ``log`` is the
natural logarithm; ``roundDecimal``/``truncate`` round the decimal text of a DOUBLE (Java's BigDecimal HALF_UP /
DOWN); math answers DOUBLE. Names that mean the same in both engines are left to DuckDB.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from cuvee.query.commons_split import split_by_whole_separator
from cuvee.query.datetime_functions import bigint, call, int_literal, number, sql_error, string_literal
from cuvee.query.errors import QueryError
from cuvee.query.java_casts import java_integral
from cuvee.query.json_arrays import json_extract_array, json_path_array

_LAMBDA = "cuvee_fn_item"  # a lambda parameter no column of a parsed query can be named (see multivalue.py)
_DOUBLE = exp.DataType.build("DOUBLE")


def _double(node: exp.Expression) -> exp.Cast:
    return exp.Cast(this=node, to=_DOUBLE)


def _arity(name: str, args: list[exp.Expression], *counts: int) -> None:
    if len(args) not in counts:
        wanted = " or ".join(str(c) for c in counts)
        raise sql_error(f"{name} takes {wanted} argument(s), got {len(args)}")


def _lambda(body: exp.Expression) -> exp.Lambda:
    return exp.Lambda(this=body, expressions=[exp.to_identifier(_LAMBDA)])


def _item() -> exp.Column:
    return exp.column(_LAMBDA, quoted=False)


def _parts(text: exp.Expression, delimiter: exp.Expression, limit: int = 0) -> exp.Expression:
    """Commons' ``splitByWholeSeparator``: the parts between whole delimiters, empty parts but the last dropped."""
    return split_by_whole_separator(text, delimiter, limit)


def _strpos(name: str, args: list[exp.Expression]) -> exp.Expression:
    """0-based index of the first (or the n-th, overlapping) occurrence; -1 when there is none. Commons'
    ``ordinalIndexOf``: an n of 0 or less is -1 (DuckDB's list_extract would count from the end), an empty
    ``find`` is at 0."""
    _arity(name, args, 2, 3)
    text, find = args[0], args[1]
    if len(args) == 2:
        return exp.Sub(this=call("strpos", text, find), expression=number(1))
    starts = call("list_filter", call("range", number(0), call("length", text)), _lambda(exp.EQ(
        this=exp.Substring(this=text.copy(), start=exp.Add(this=_item(), expression=number(1)),
                           length=call("length", find.copy())), expression=find.copy())))
    instance = exp.paren(args[2])
    nth = call("list_extract", starts, instance)  # 1-based, as the instance counts
    return exp.Case(ifs=[exp.If(this=exp.LTE(this=instance.copy(), expression=number(0)), true=number(-1)),
                         exp.If(this=exp.EQ(this=find.copy(), expression=exp.Literal.string("")), true=number(0))],
                    default=call("coalesce", nth, number(-1)))


def _substr(name: str, args: list[exp.Expression]) -> exp.Expression:
    """``substr(s, begin[, end])``: 0-based begin, exclusive end (-1: to the end); a negative index counts from the
    end, as Commons' ``StringUtils.substring`` does — a literal's or an expression's value alike."""
    _arity(name, args, 2, 3)
    text = args[0]
    length = call("length", text.copy())

    def from_end(value: exp.Expression) -> exp.Expression:
        return call("greatest", exp.Add(this=length.copy(), expression=value), number(0))

    def position(node: exp.Expression) -> exp.Expression:  # a 0-based index, from the end when negative
        try:
            value = int_literal(node, name, "an index")
        except QueryError:  # an expression: its sign is known only per row
            value_of = exp.paren(node)
            return exp.Case(ifs=[exp.If(this=exp.LT(this=value_of, expression=number(0)),
                                        true=from_end(value_of.copy()))], default=value_of.copy())
        return number(value) if value >= 0 else from_end(number(value))

    begin = position(args[1])
    if len(args) == 2 or (isinstance(args[2], exp.Neg) and int_literal(args[2], name, "the end") == -1):
        return exp.Substring(this=text, start=exp.Add(this=begin, expression=number(1)))
    end = position(args[2])
    if isinstance(end, exp.Case):  # an expression's -1 also means the end, as Pinot checks the value
        end = exp.Case(ifs=[exp.If(this=exp.EQ(this=exp.paren(args[2].copy()), expression=number(-1)),
                                   true=length.copy())], default=end)
    count = call("greatest", exp.Sub(this=end, expression=begin.copy()), number(0))
    return exp.Substring(this=text, start=exp.Add(this=begin.copy(), expression=number(1)), length=count)


def _split(name: str, args: list[exp.Expression]) -> exp.Expression:
    """``split(s, delimiter[, limit])``: at most ``limit`` parts (0 or less: no limit), the last one the rest."""
    _arity(name, args, 2, 3)
    return _parts(args[0], args[1], int_literal(args[2], name, "the limit") if len(args) == 3 else 0)


def _split_part(name: str, args: list[exp.Expression]) -> exp.Expression:
    """The part at a 0-based index (negative: from the end); Pinot answers the string 'null' past the end."""
    _arity(name, args, 3)
    index = int_literal(args[2], name, "the index")
    picked = call("list_extract", _parts(args[0], args[1]), number(index + 1 if index >= 0 else index))
    return call("coalesce", picked, exp.Literal.string("null"))


def _concat(name: str, args: list[exp.Expression]) -> exp.Expression:
    if len(args) == 3:  # Pinot's concat(a, b, separator)
        return call("concat", args[0], args[2], args[1])
    return call("concat", *args)


def _pad(node: exp.Pad) -> exp.Expression:
    """Commons' leftPad/rightPad: a string already as long as the size is kept whole (DuckDB would cut it), and an
    empty pad is a space (DuckDB raises an error)."""
    text, size = node.this, node.expression
    fill = node.args.get("fill_pattern") or exp.Literal.string(" ")
    if isinstance(fill, exp.Literal) and fill.is_string:
        fill = fill if fill.name else exp.Literal.string(" ")
    else:
        fill = exp.Case(ifs=[exp.If(this=exp.EQ(this=fill, expression=exp.Literal.string("")),
                                    true=exp.Literal.string(" "))], default=fill.copy())
    padded = call("lpad" if node.args.get("is_left") else "rpad", text.copy(), size.copy(), fill)
    return exp.Case(ifs=[exp.If(this=exp.GTE(this=call("length", text), expression=exp.paren(size)),
                                true=text.copy())], default=padded)


def _decimal_text(value: exp.Expression) -> exp.Expression:
    """A DOUBLE as the exact decimal of its shortest text (Java's ``BigDecimal.valueOf``); NULL from 10^20 on."""
    return exp.TryCast(this=exp.Cast(this=_double(value), to=exp.DataType.build("VARCHAR")),
                       to=exp.DataType.build("DECIMAL(38, 18)"))


def _scaled(name: str, args: list[exp.Expression], duck: str, plain: Callable[[exp.Expression], exp.Expression]
            ) -> exp.Expression:
    """roundDecimal / truncate with a scale: on the decimal text (HALF_UP / DOWN), as a DOUBLE; without one:
    Java's Math.round / toward zero."""
    _arity(name, args, 1, 2)
    if len(args) == 1:
        return _double(plain(args[0]))
    scale = int_literal(args[1], name, "the scale")
    exact = _double(call(duck, _decimal_text(args[0]), number(scale)))
    return call("coalesce", exact, _double(call(duck, _double(args[0].copy()), number(scale))))


def _special(text: str) -> exp.Cast:
    """A DOUBLE DuckDB writes no literal for: 'NaN', 'Infinity', '-Infinity'."""
    return _double(exp.Literal.string(text))


def _int_div(name: str, args: list[exp.Expression]) -> exp.Expression:
    """Pinot's ``(long) Math.floor(a / b)`` in doubles: a zero divisor answers Long.MAX/MIN_VALUE (0 for 0 / 0)."""
    _arity(name, args, 2)
    return java_integral(call("floor", exp.Div(this=_double(args[0]), expression=_double(args[1]))))


def _logarithm(value: exp.Expression, of_positive: Callable[[exp.Expression], exp.Expression]) -> exp.Expression:
    """Java's ``Math.log`` family: -Infinity at 0, NaN below (DuckDB raises an error for both). ``of_positive`` is
    given the value only where it is positive (or NaN), so a constant argument cannot fail while being folded."""
    x = _double(value)
    guarded = exp.Case(ifs=[exp.If(this=exp.GT(this=x.copy(), expression=number(0)), true=x.copy())])
    return exp.Case(ifs=[exp.If(this=exp.EQ(this=x.copy(), expression=number(0)), true=_special("-Infinity")),
                         exp.If(this=exp.LT(this=x.copy(), expression=number(0)), true=_special("NaN"))],
                    default=of_positive(guarded))


def _log(name: str, args: list[exp.Expression]) -> exp.Expression:
    """Pinot's ``log`` is ``ln``; DuckDB's two-argument ``log(base, x)`` is kept, with Java's answers at x <= 0."""
    _arity(name, args, 1, 2)
    if len(args) == 1:
        return _logarithm(args[0], lambda x: call("ln", x))
    return _logarithm(args[1], lambda x: call("log", args[0], x))


def _sqrt(value: exp.Expression) -> exp.Expression:
    """Java's ``Math.sqrt``: NaN below 0 (DuckDB raises an error)."""
    x = _double(value)
    guarded = exp.Case(ifs=[exp.If(this=exp.LT(this=x.copy(), expression=number(0)), true=exp.Null())],
                       default=x.copy())
    return exp.Case(ifs=[exp.If(this=exp.LT(this=x.copy(), expression=number(0)), true=_special("NaN"))],
                    default=call("sqrt", guarded))


def _json_path(node: exp.Expression, name: str) -> str:
    path = string_literal(node, name, "the JSON path").strip()
    if not path.startswith("$"):
        raise sql_error(f"{name}: the JSON path must start with '$', got {path!r}")
    return path


_JSON_TYPES = {"INT": "INTEGER", "LONG": "BIGINT", "FLOAT": "FLOAT", "DOUBLE": "DOUBLE", "BOOLEAN": "BOOLEAN",
               "STRING": "VARCHAR", "BIG_DECIMAL": "DECIMAL(38, 18)", "TIMESTAMP": "TIMESTAMP", "JSON": "VARCHAR",
               "BYTES": "BLOB"}


_WHOLE_NUMBER = r"[+-]?[0-9]+"


def _typed(value: exp.Expression, duck: str, booleans: bool = True) -> exp.Expression:
    """A JSON value's text as ``duck``, NULL where it does not convert. As Java's ``Number.intValue``/``longValue``
    an INT or LONG drops a fraction (12.7 is 12; DuckDB's cast would round it to 13), and with ``booleans``
    (jsonExtractScalar, not jsonPath…) a number type reads true/false as 1/0."""
    if duck == "VARCHAR":
        return value
    if duck == "TIMESTAMP":  # Pinot reads a TIMESTAMP as epoch millis or as timestamp text
        return call("coalesce", call("epoch_ms", exp.TryCast(this=value, to=exp.DataType.build("BIGINT"))),
                    exp.TryCast(this=value.copy(), to=exp.DataType.build("TIMESTAMP")))
    target = exp.DataType.build(duck)
    if duck == "BOOLEAN":
        return exp.TryCast(this=value, to=target)
    ifs = []
    if booleans:
        ifs += [exp.If(this=exp.EQ(this=value.copy(), expression=exp.Literal.string(text)),
                       true=exp.Cast(this=number(bit), to=target.copy())) for text, bit in (("true", 1), ("false", 0))]
    if duck in ("INTEGER", "BIGINT"):
        ifs.append(exp.If(this=call("regexp_full_match", value.copy(), exp.Literal.string(_WHOLE_NUMBER)),
                          true=exp.TryCast(this=value.copy(), to=target.copy())))
        fallback: exp.Expression = exp.TryCast(this=call("trunc", exp.TryCast(this=value.copy(), to=_DOUBLE)),
                                               to=target.copy())
    else:
        fallback = exp.TryCast(this=value.copy(), to=target.copy())
    return exp.Case(ifs=ifs, default=fallback) if ifs else fallback


def _parsable(json: exp.Expression) -> exp.Expression:
    """``json`` where it is well-formed JSON, else NULL: malformed JSON gives the default (or NULL), as in Pinot,
    instead of DuckDB's error."""
    return exp.Case(ifs=[exp.If(this=call("json_valid", json), true=json.copy())])


def _json_extract_scalar(name: str, args: list[exp.Expression]) -> exp.Expression:
    """``jsonExtractScalar(json, path, type[, default])``: NULL (or the default) where the path is missing or the
    value does not convert; the ``…_ARRAY`` types answer a list (a path with ``[*]``, or one naming an array; see
    ``cuvee.query.json_arrays``)."""
    _arity(name, args, 3, 4)
    path = exp.Literal.string(_json_path(args[1], name))
    kind = string_literal(args[2], name, "the result type").strip().upper()
    element = kind[:-len("_ARRAY")] if kind.endswith("_ARRAY") else None
    if (element or kind) not in _JSON_TYPES:
        raise sql_error(f"{name}: unknown result type {kind!r}, expected one of "
                        f"{', '.join(_JSON_TYPES)} (or their _ARRAY forms)")
    if element is not None:  # a list, empty where the path is missing (Pinot's MV readers)
        return json_extract_array(name, args[0], path.name, element, _JSON_TYPES[element],
                                  args[3] if len(args) == 4 else None)
    json = _parsable(args[0])
    value = _typed(call("json_extract_string", json, path), _JSON_TYPES[kind])
    if len(args) == 4:
        return call("coalesce", value, _typed(exp.Cast(this=args[3], to=exp.DataType.build("VARCHAR")),
                                              _JSON_TYPES[kind]))
    return value


def _json_path_typed(duck: str) -> Callable[[str, list[exp.Expression]], exp.Expression]:
    def translate(name: str, args: list[exp.Expression]) -> exp.Expression:
        _arity(name, args, 2, 3)
        path = exp.Literal.string(_json_path(args[1], name))
        value = _typed(call("json_extract_string", _parsable(args[0]), path), duck, booleans=False)
        return value if len(args) == 2 else call("coalesce", value, _typed(
            exp.Cast(this=args[2], to=exp.DataType.build("VARCHAR")), duck, booleans=False))
    return translate


def _json_extract_key(name: str, args: list[exp.Expression]) -> exp.Expression:
    """``jsonExtractKey(json, '$.a.*')``: the paths of an object's keys, in Pinot's ``$['a']['key']`` spelling.
    Only a dotted path ending in ``.*`` (``$.*`` for the top level) is translated."""
    _arity(name, args, 2)
    path = _json_path(args[1], name)
    segments = path[1:].split(".")
    if segments[-1] != "*" or any(not s.replace("_", "").isalnum() for s in segments[1:-1]) or segments[0]:
        raise sql_error(f"{name}: only paths like '$.*' or '$.a.b.*' (an object's keys) are supported, got {path!r}")
    parent = "$" + "".join(f".{s}" for s in segments[1:-1])
    prefix = "$" + "".join(f"['{s}']" for s in segments[1:-1])
    keys = call("json_keys", _parsable(args[0]), exp.Literal.string(parent))
    quoted = exp.DPipe(this=exp.DPipe(this=exp.Literal.string(prefix + "['"), expression=_item()),
                       expression=exp.Literal.string("']"))
    return call("list_transform", keys, _lambda(quoted))


_NOT_HEX = ("a STRING given to a hash function is read as hex bytes, as Pinot reads it, and this one is not hex; "
            "write toUtf8(...) around it to hash its text")


def _bytes(value: exp.Expression) -> exp.Expression:
    """A hash function's input as Pinot converts it to BYTES: a BYTES value as it is, a STRING as the bytes its
    hex spells (Pinot's implicit STRING → BYTES; a STRING that is not hex is an error saying so, where Pinot's
    is a decoder's), NULL as NULL, anything else as its text's UTF-8 (Pinot refuses those). The value is bound
    once, as a lambda's parameter: written out in each branch, nested hashes would grow the SQL six-fold a level."""
    item = _item()
    text = exp.Cast(this=item.copy(), to=exp.DataType.build("VARCHAR"))
    hex_text = call("regexp_full_match", text, exp.Literal.string("([0-9a-fA-F]{2})*"))
    converted = exp.Case(ifs=[
        exp.If(this=exp.Is(this=item.copy(), expression=exp.null()), true=exp.null()),
        exp.If(this=exp.EQ(this=call("typeof", item.copy()), expression=exp.Literal.string("BLOB")),
               true=exp.Cast(this=item.copy(), to=exp.DataType.build("BLOB"))),
        exp.If(this=exp.EQ(this=call("typeof", item.copy()), expression=exp.Literal.string("VARCHAR")),
               true=exp.Case(ifs=[exp.If(this=hex_text, true=call("unhex", text.copy()))],
                             default=exp.Cast(this=call("error", exp.Literal.string(_NOT_HEX)),
                                              to=exp.DataType.build("BLOB"))))],
        default=call("encode", text.copy()))
    return call("list_extract", call("list_transform", exp.Array(expressions=[value]), _lambda(converted)),
                exp.Literal.number(1))


def _utf8(value: exp.Expression) -> exp.Expression:
    return call("encode", exp.Cast(this=value, to=exp.DataType.build("VARCHAR")))


def _seed(value: exp.Expression) -> exp.Expression:
    return exp.Cast(this=value, to=exp.DataType.build("INTEGER"))


_MURMUR2_64_SEED = 0xE17A1465 - 2 ** 32  # Pinot's default seed for murmurHash2Bit64, as a Java int


Translator = Callable[[str, list[exp.Expression]], exp.Expression]  # (Pinot's upper-case name, arguments) -> DuckDB


def _hash(udf: str, seeds: tuple[int, ...] = (), read: Callable[[exp.Expression], exp.Expression] = _bytes,
          default_seed: int | None = None, widen: bool = False) -> Translator:
    """A hash function over ``cuvee.query.hash_functions``: ``seeds`` lists the argument counts taken (1: bytes, 2:
    bytes and seed); with ``default_seed`` a one-argument call hashes with that seed; ``widen`` answers a LONG."""
    def translate(name: str, args: list[exp.Expression]) -> exp.Expression:
        _arity(name, args, *(seeds or (1,)))
        parts = [read(args[0])]
        if len(args) == 2:
            parts.append(_seed(args[1]))
        elif default_seed is not None:
            parts.append(_seed(number(default_seed) if default_seed >= 0 else exp.Neg(this=number(-default_seed))))
        answer = call(udf, *parts)
        return exp.Cast(this=answer, to=exp.DataType.build("BIGINT")) if widen else answer
    return translate


_HASHES: dict[str, Translator] = {
    "SHA512": _hash("cuvee_sha512"),
    "SHA224": _hash("cuvee_sha3_224"),  # Pinot's sha224 is DigestUtils.sha3_224Hex
    "MD5_RAW": lambda name, args: (_arity(name, args, 1), call("unhex", call("md5", _bytes(args[0]))))[1],
    "MURMURHASH2": _hash("cuvee_murmur2_32"),
    "MURMUR2": _hash("cuvee_murmur2_32"),
    "MURMURHASH2UTF8": _hash("cuvee_murmur2_32", read=_utf8),
    "MURMURHASH2BIT64": _hash("cuvee_murmur2_64", (1, 2), default_seed=_MURMUR2_64_SEED),
    "MURMURHASH3BIT32": _hash("cuvee_murmur3_32", (2,)),
    "MURMUR3_32": _hash("cuvee_murmur3_32", (1,), default_seed=0),
    "MURMURHASH3BIT64": _hash("cuvee_murmur3_64", (2,)),
    "MURMURHASH3BIT128": _hash("cuvee_murmur3_128", (2,)),
    "MURMURHASH3X64BIT32": _hash("cuvee_murmur3_x64_32", (2,)),
    "MURMURHASH3X64BIT64": _hash("cuvee_murmur3_x64_32", (2,), widen=True),  # Pinot answers the 32-bit hash
    "MURMURHASH3X64BIT128": _hash("cuvee_murmur3_x64_128", (2,)),
    "ADLER32": _hash("cuvee_adler32"),
    "CRC32": _hash("cuvee_crc32"),
}
for _udf, (_name, _alias) in {"fnv1_32": ("FNV1HASH32", "FNV1_32"), "fnv1a_32": ("FNV1AHASH32", "FNV1A_32"),
                              "fnv1_64": ("FNV1HASH64", "FNV1_64"), "fnv1a_64": ("FNV1AHASH64", "FNV1A_64")}.items():
    _HASHES[_name] = _HASHES[_alias] = _hash(f"cuvee_{_udf}")
    _HASHES[f"{_name}UTF8"] = _hash(f"cuvee_{_udf}", read=_utf8)


_HANDLERS: dict[str, Translator] = {
    "STRPOS": _strpos,
    "SUBSTR": _substr,
    "SPLIT": _split,
    "SPLITPART": _split_part,
    "CONCAT": _concat,
    "CODEPOINT": lambda name, args: (_arity(name, args, 1), call("unicode", args[0]))[1],
    "TOUTF8": lambda name, args: (_arity(name, args, 1), call("encode", args[0]))[1],
    "INTDIV": _int_div,
    "ROUNDDECIMAL": lambda name, args: _scaled(name, args, "round", lambda x: call("floor", exp.Add(
        this=_double(x), expression=exp.Literal.number(0.5)))),
    "TRUNCATE": lambda name, args: _scaled(name, args, "trunc", lambda x: call("trunc", _double(x))),
    "LOG": _log,
    "JSON_EXTRACT_SCALAR": _json_extract_scalar,
    "JSONEXTRACTSCALAR": _json_extract_scalar,
    "JSON_EXTRACT_KEY": _json_extract_key,
    "JSONEXTRACTKEY": _json_extract_key,
    "JSONPATHSTRING": _json_path_typed("VARCHAR"),
    "JSONPATHLONG": _json_path_typed("BIGINT"),
    "JSONPATHDOUBLE": _json_path_typed("DOUBLE"),
    "JSONPATHARRAY": lambda name, args: json_path_array(name, args, default_empty=False),
    "JSON_PATH_ARRAY": lambda name, args: json_path_array(name, args, default_empty=False),
    "JSONPATHARRAYDEFAULTEMPTY": lambda name, args: json_path_array(name, args, default_empty=True),
    "JSON_PATH_ARRAY_DEFAULT_EMPTY": lambda name, args: json_path_array(name, args, default_empty=True),
    **_HASHES,
}
_UNAVAILABLE = {"MD2": "no MD2 digest here", "CRC32C": "no CRC-32C here", "CITYHASH32": "no CityHash here",
                "CITYHASH64": "no CityHash here", "CITYHASH128": "no CityHash here"}
# sqlglot's own nodes for math DuckDB answers with the argument's type where Pinot answers DOUBLE: the argument is
# made a DOUBLE first, as Pinot's take one (abs of the smallest BIGINT would overflow), and so is the answer.
_DOUBLE_MATH = (exp.Abs, exp.Ceil, exp.Floor, exp.Sign)


def _log_node(node: exp.Log) -> exp.Expression:
    """``log10(x)`` / ``log2(x)`` (sqlglot's ``Log(base, x)``) with Java's answers at x <= 0; Pinot's ``log2`` is
    ``Math.log(x) / Math.log(2)``."""
    base, value = node.this, node.expression
    if value is None:  # a base-less Log: DuckDB's log10
        base, value = number(10), base
    if isinstance(base, exp.Literal) and base.name == "10":
        return _logarithm(value, lambda x: call("log10", x))
    if isinstance(base, exp.Literal) and base.name == "2":
        return _logarithm(value, lambda x: exp.Div(this=call("ln", x), expression=call("ln", _double(number(2)))))
    return _logarithm(value, lambda x: call("log", base, x))


def translate_other(upper: str, args: list[exp.Expression]) -> exp.Expression | None:
    """The DuckDB form of Pinot function ``upper`` (an anonymous call's upper-case name), or None."""
    if upper in _UNAVAILABLE:
        raise sql_error(f"function {upper} is not supported ({_UNAVAILABLE[upper]})")
    handler = _HANDLERS.get(upper)
    return None if handler is None else handler(upper, args)


def translate_node(node: exp.Expression) -> exp.Expression | None:
    """Pinot's meaning for a node sqlglot parsed into one of its own classes (lpad/rpad, DOUBLE math, ln, log10,
    log2, sqrt), or None."""
    if isinstance(node, exp.Pad):
        return _pad(node)
    if isinstance(node, _DOUBLE_MATH):
        node.set("this", _double(node.this))
        return _double(node)
    if isinstance(node, exp.Ln):
        return _logarithm(node.this, lambda x: call("ln", x))
    if isinstance(node, exp.Log):
        return _log_node(node)
    if isinstance(node, exp.Sqrt):
        return _sqrt(node.this)
    digest = _DIGESTS.get(type(node))
    if digest is not None:
        if isinstance(node, exp.SHA2) and str(node.args.get("length") or 256) != "256":  # DuckDB would answer SHA-256
            raise sql_error(f"sha2 with {node.args['length'].sql()} bits is not supported: use sha256(x) or sha512(x)")
        return call(digest, _bytes(node.this))  # of Pinot's BYTES: DuckDB would hash a STRING's UTF-8
    return None


_DIGESTS: dict[type, str] = {exp.MD5: "md5", exp.SHA: "sha1", exp.SHA2: "sha256"}  # md5, sha, sha256
