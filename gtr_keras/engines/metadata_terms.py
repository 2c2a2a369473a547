"""What an engine filters on: a record's filterable metadata, and a `Filter`'s clauses with each field's type and
the values gtr-keras compares (docs/filters.md), for the engines' own filter languages to express exactly.

A value of no filter type (null, an object, a list holding a non-string) is no value: `MetadataColumns` treats
its document as lacking the field, and so does every engine, which therefore never receives it. Numbers are
float64s, as gtr-keras compares them (`year = 2019` matches 2019.0; an integer past 2**53 is its nearest
float64).
"""

import dataclasses

from gtr_keras.beir.readers import metadata_type
from gtr_keras.errors import UserError
from gtr_keras.filters.expressions import Filter
from gtr_keras.filters.metadata_columns import MetadataColumns

_SAMPLES = {"string": "", "number": 0.0, "boolean": False, "list": []}


def filterable(metadata: dict | None) -> dict:
    """`metadata`'s fields of a filter type, numbers as float64s (`-0.0` as `0.0`, which it equals).

    Example:
    >>> filterable({"year": 2019, "lang": "en", "note": None, "tags": ["a"], "x": {"y": 1}})
    {'year': 2019.0, 'lang': 'en', 'tags': ['a']}
    """
    kept = {}
    for field, value in (metadata or {}).items():
        kind = metadata_type(value)
        if kind is not None:
            kept[field] = float(value) + 0.0 if kind == "number" else value
    return kept


@dataclasses.dataclass(frozen=True)
class Term:
    """One clause as an engine translates it: `clause` (its `field`, `op`, `text`), `kind` (the field's type:
    "string", "number", "boolean" or "list") and `values`, what gtr-keras compares: the strings as written for a
    string or list field, `True`/`False` for a boolean one, float64s for a number one."""

    clause: object
    kind: str
    values: tuple


def terms(filter: Filter | None, metadata_types: dict[str, str]) -> list[Term]:
    """The clauses of `filter` as `Term`s, checked against the collection's `metadata_types` as a local index
    checks them (`MetadataColumns.check`: the same errors for an unknown field or a value of the wrong type).

    Raises:
        UserError: a clause on a field the collection does not hold, or of the wrong type.

    Example:
    >>> types = {"year": "number", "code": "string"}
    >>> [(t.kind, t.values) for t in terms(Filter(["year >= 2019", "code = 007"]), types)]
    [('number', (2019.0,)), ('string', ('007',))]
    """
    if filter is None or not filter.clauses:
        return []
    unknown = set(metadata_types.values()) - set(_SAMPLES)
    if unknown:
        raise UserError(f"collection metadata types: unknown type {sorted(unknown)[0]!r} (expected one of {_SAMPLES})")
    sample = {field: _SAMPLES[kind] for field, kind in metadata_types.items()}
    MetadataColumns(["sample"], [sample]).check(filter)
    found = []
    for clause in filter.clauses:
        kind = metadata_types[clause.field]
        if kind == "boolean":
            values = clause.values
        elif kind == "number":
            values = tuple(float(written) + 0.0 for written in clause.written)
        else:
            values = clause.written
        found.append(Term(clause, kind, tuple(values)))
    return found
