"""The Spark schemas of the ``inkpen`` data source: what a read yields, what a bulk load accepts.

Keys are bytes in inkpen, so a read gives ``bucket`` and ``key`` as ``binary`` by default; with
the option ``key_type=string`` they (and index fields and terms) are UTF-8 strings instead, which
is easier to filter on in SQL but refuses (with a clear error) keys that are not valid UTF-8.

A read (``spark.read``) and the change feed (``spark.readStream``) yield rows of one schema, in
this order (Spark asks a Python source for its schema with the same options for both, so one
schema must describe both)::

    bucket         binary | string   not null
    key            binary | string   not null
    value          binary            nullable   (values=true, the default); null only for a
                                                delete in the feed
    size           bigint            nullable   (values=false: heads only, no value column); null
                                                only for a delete in the feed
    sqn            bigint            not null   the object's (the change's) sequence number
    kind           string            not null   "put" or "delete"; always "put" in a read, whose
                                                rows are the latest change of each live object
    last_modified  timestamp         not null   when the object was written
    indexes        array<struct<field, term>>   (indexes=true, reads only) the object's live
                                                index entries

A bulk load accepts a DataFrame with exactly these columns (names in any case):

- ``bucket``, ``key``: ``string`` (stored as UTF-8) or ``binary``;
- ``value``: ``binary``;
- ``indexes`` (optional): ``array<struct<op: string, field, term>>`` with op ``"add"`` or
  ``"remove"``, or ``array<struct<field, term>>`` (every entry an add, the shape a read with
  ``indexes=true`` gives); ``field`` and ``term`` are ``string`` or ``binary``;
- ``ttl`` (optional): seconds the object lives from the time its task writes it, any integral
  or floating type; null means no expiry;
- ``kind`` (optional): ``string``, the column a read or the feed yields; a row of kind ``"put"``
  is loaded, a row of kind ``"delete"`` (or any other) refuses the load: a bulk load only adds
  objects (filter deletes out, or apply them with ``Bookie.delete``).

So a read's DataFrame loads into another database once its ``sqn`` and ``last_modified`` are
dropped (the load gives every object a new SQN and time).

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
_OPTIONAL = ("indexes", "ttl", "kind")
_GIVEN_BY_LOAD = ("sqn", "last_modified")
_EXAMPLE = (
    'e.g. df.selectExpr("\'users\' AS bucket", "id AS key", "CAST(payload AS BINARY) AS value")'
)


def index_entry_type(key_type: KeyType) -> StructType:
    """The struct of one index entry a read yields: (field, term)."""
    name = StringType() if key_type == "string" else BinaryType()
    return StructType([StructField("field", name, False), StructField("term", name, False)])


def row_schema(key_type: KeyType, *, values: bool, indexes: bool) -> StructType:
    """The schema of a read's and of the feed's rows (see the module docstring)."""
    name = StringType() if key_type == "string" else BinaryType()
    fields = [StructField("bucket", name, False), StructField("key", name, False)]
    if values:
        fields.append(StructField("value", BinaryType(), True))
    else:
        fields.append(StructField("size", LongType(), True))
    fields.append(StructField("sqn", LongType(), False))
    fields.append(StructField("kind", StringType(), False))
    fields.append(StructField("last_modified", TimestampType(), False))
    if indexes:
        entries = ArrayType(index_entry_type(key_type), containsNull=False)
        fields.append(StructField("indexes", entries, False))
    return StructType(fields)


def read_schema(options: ReadOptions) -> StructType:
    """The schema a read with these options yields (see the module docstring)."""
    return row_schema(options.key_type, values=options.values, indexes=options.indexes)


@dataclass(frozen=True, slots=True)
class LoadColumns:
    """Where a bulk load finds each input, by the DataFrame's own column names."""

    bucket: str
    key: str
    value: str
    indexes: str | None = None
    index_shape: IndexShape = "ops"
    ttl: str | None = None
    kind: str | None = None


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
            f"needs bucket, key and value (optional: indexes, ttl, kind), {_EXAMPLE}"
        )
    given_by_load = [name for name in _GIVEN_BY_LOAD if name in by_name]
    if given_by_load:
        raise UsageError(
            f"the DataFrame to load has column(s) {', '.join(given_by_load)}, which a load gives "
            "every object anew (a new SQN, the time of the load); drop them "
            f"(df.drop({', '.join(repr(n) for n in given_by_load)})) to load what a read yields"
        )
    unknown = sorted(set(by_name) - {*_REQUIRED, *_OPTIONAL})
    if unknown:
        raise UsageError(
            f"the DataFrame to load has column(s) {', '.join(unknown)} that inkpen does not store; "
            "drop them (df.drop(...)) or select bucket, key, value, indexes, ttl, kind"
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
    kind = by_name.get("kind")
    if kind is not None and not isinstance(kind.dataType, StringType):
        raise UsageError(
            f"column {kind.name} is {_type_name(kind.dataType)}; kind must be a string, 'put' "
            "for every row a bulk load adds"
        )
    return LoadColumns(
        bucket=by_name["bucket"].name,
        key=by_name["key"].name,
        value=value.name,
        indexes=None if indexes is None else indexes.name,
        index_shape=shape,
        ttl=None if ttl is None else ttl.name,
        kind=None if kind is None else kind.name,
    )
