"""The Spark schemas of the ``inkpen`` data source: what a read yields, what a bulk load accepts.

Keys are bytes in inkpen, so a read gives ``bucket`` and ``key`` as ``binary`` by default; with
the option ``key_type=string`` they (and index fields and terms) are UTF-8 strings instead, which
is easier to filter on in SQL but refuses (with a clear error) keys that are not valid UTF-8.

A read yields, in this order::

    bucket         binary | string   not null
    key            binary | string   not null
    value          binary            not null   (values=true, the default)
    size           bigint            not null   (values=false: heads only, no value column)
    sqn            bigint            not null   the object's sequence number
    last_modified  timestamp         not null   when the object was written
    indexes        array<struct<field, term>>   (indexes=true) the object's live index entries

A bulk load accepts a DataFrame with exactly these columns (names in any case):

- ``bucket``, ``key``: ``string`` (stored as UTF-8) or ``binary``;
- ``value``: ``binary``;
- ``indexes`` (optional): ``array<struct<op: string, field, term>>`` with op ``"add"`` or
  ``"remove"``, or ``array<struct<field, term>>`` (every entry an add, the shape a read with
  ``indexes=true`` gives); ``field`` and ``term`` are ``string`` or ``binary``;
- ``ttl`` (optional): seconds the object lives from the time its task writes it, any integral
  or floating type; null means no expiry.

The load's columns are checked on the driver before any task runs; values (a null key, an empty
bucket, an oversize value) are checked by the task that meets them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from inkpen.errors import UsageError

from .options import KeyType, ReadOptions

IndexShape = Literal["ops", "adds"]

_NAME_TYPES = (StringType, BinaryType)
_TTL_TYPES = (ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType)
_REQUIRED = ("bucket", "key", "value")
_OPTIONAL = ("indexes", "ttl")
_EXAMPLE = (
    'e.g. df.selectExpr("\'users\' AS bucket", "id AS key", "CAST(payload AS BINARY) AS value")'
)


def index_entry_type(key_type: KeyType) -> StructType:
    """The struct of one index entry a read yields: (field, term)."""
    name = StringType() if key_type == "string" else BinaryType()
    return StructType([StructField("field", name, False), StructField("term", name, False)])


def read_schema(options: ReadOptions) -> StructType:
    """The schema a read with these options yields (see the module docstring)."""
    name = StringType() if options.key_type == "string" else BinaryType()
    fields = [StructField("bucket", name, False), StructField("key", name, False)]
    if options.values:
        fields.append(StructField("value", BinaryType(), False))
    else:
        fields.append(StructField("size", LongType(), False))
    fields.append(StructField("sqn", LongType(), False))
    fields.append(StructField("last_modified", TimestampType(), False))
    if options.indexes:
        entries = ArrayType(index_entry_type(options.key_type), containsNull=False)
        fields.append(StructField("indexes", entries, False))
    return StructType(fields)


@dataclass(frozen=True, slots=True)
class LoadColumns:
    """Where a bulk load finds each input, by the DataFrame's own column names."""

    bucket: str
    key: str
    value: str
    indexes: str | None = None
    index_shape: IndexShape = "ops"
    ttl: str | None = None


def _type_name(data_type: DataType) -> str:
    return data_type.simpleString()


def _check_name_type(column: str, data_type: DataType) -> None:
    if not isinstance(data_type, _NAME_TYPES):
        raise UsageError(
            f"column {column} is {_type_name(data_type)}; it must be string or binary "
            f"(cast it: CAST({column} AS STRING))"
        )


def _index_shape(column: str, data_type: DataType) -> IndexShape:
    wanted = (
        f"column {column} must be array<struct<op: string, field, term>> (op 'add' or 'remove') "
        "or array<struct<field, term>>, with field and term string or binary"
    )
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        raise UsageError(f"{wanted}; it is {_type_name(data_type)}")
    members = {f.name.lower(): f.dataType for f in data_type.elementType.fields}
    if set(members) not in ({"op", "field", "term"}, {"field", "term"}):
        raise UsageError(f"{wanted}; its entries have fields {sorted(members)}")
    for name in ("field", "term"):
        if not isinstance(members[name], _NAME_TYPES):
            raise UsageError(f"{wanted}; its {name} is {_type_name(members[name])}")
    if "op" in members:
        if not isinstance(members["op"], StringType):
            raise UsageError(f"{wanted}; its op is {_type_name(members['op'])}")
        return "ops"
    return "adds"


def load_columns(schema: StructType) -> LoadColumns:
    """Check a bulk load's input schema; raise :class:`UsageError` saying what to change."""
    by_name: dict[str, StructField] = {}
    for field in schema.fields:
        lowered = field.name.lower()
        if lowered in by_name:
            raise UsageError(f"the DataFrame has two columns named {lowered}; keep one")
        by_name[lowered] = field
    missing = [name for name in _REQUIRED if name not in by_name]
    if missing:
        raise UsageError(
            f"the DataFrame to load lacks column(s) {', '.join(missing)}; an inkpen bulk load "
            f"needs bucket, key and value (optional: indexes, ttl), {_EXAMPLE}"
        )
    unknown = sorted(set(by_name) - {*_REQUIRED, *_OPTIONAL})
    if unknown:
        raise UsageError(
            f"the DataFrame to load has column(s) {', '.join(unknown)} that inkpen does not store; "
            "drop them (df.drop(...)) or select bucket, key, value, indexes, ttl"
        )
    _check_name_type(by_name["bucket"].name, by_name["bucket"].dataType)
    _check_name_type(by_name["key"].name, by_name["key"].dataType)
    value = by_name["value"]
    if not isinstance(value.dataType, BinaryType):
        raise UsageError(
            f"column {value.name} is {_type_name(value.dataType)}; values must be binary "
            f"(cast it: CAST({value.name} AS BINARY))"
        )
    indexes = by_name.get("indexes")
    shape: IndexShape = "ops"
    if indexes is not None:
        shape = _index_shape(indexes.name, indexes.dataType)
    ttl = by_name.get("ttl")
    if ttl is not None and not isinstance(ttl.dataType, _TTL_TYPES):
        raise UsageError(
            f"column {ttl.name} is {_type_name(ttl.dataType)}; ttl must be a number of seconds "
            f"(cast it: CAST({ttl.name} AS DOUBLE))"
        )
    return LoadColumns(
        bucket=by_name["bucket"].name,
        key=by_name["key"].name,
        value=value.name,
        indexes=None if indexes is None else indexes.name,
        index_shape=shape,
        ttl=None if ttl is None else ttl.name,
    )
