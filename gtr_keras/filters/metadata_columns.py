"""`MetadataColumns`: the metadata of an index's documents as one NumPy column a field, and the mask of the
rows a `Filter` allows.

A string field is a column of int32 codes into its vocabulary (-1 where a document lacks it), a number field
a float64 column (NaN where absent), a boolean field an int8 one (-1 where absent), and a list field (lists of
strings) its elements' codes with offsets, as a sparse row does. A clause is then a few vectorised comparisons
over N rows, whatever the number of distinct values.
"""

import numpy as np

from gtr_keras.beir.readers import fits_float64, metadata_type
from gtr_keras.errors import DataError, UserError
from gtr_keras.filters.expressions import ORDER_OPERATORS


class _Column:
    def __init__(self, kind, num_rows):
        self.kind, self.num_rows = kind, num_rows
        self.vocabulary, self.rows, self.values = {}, [], []

    def add(self, row, value):
        self.rows.append(row)
        if self.kind == "list":
            self.values.append([self.vocabulary.setdefault(item, len(self.vocabulary)) for item in value])
        elif self.kind == "string":
            self.values.append(self.vocabulary.setdefault(value, len(self.vocabulary)))
        else:
            self.values.append(value)

    def freeze(self):
        rows = np.asarray(self.rows, np.int64)
        self.present = np.zeros(self.num_rows, bool)
        self.present[rows] = True
        if self.kind == "list":
            lengths = np.zeros(self.num_rows, np.int64)
            lengths[rows] = [len(items) for items in self.values]
            self.element_rows = np.repeat(np.arange(self.num_rows), lengths)
            flat = [code for items in self.values for code in items]
            self.codes = np.asarray(flat, np.int32)
        else:
            dtype, missing = {"string": (np.int32, -1), "number": (np.float64, np.nan), "boolean": (np.int8, -1)}[
                self.kind
            ]
            self.codes = np.full(self.num_rows, missing, dtype)
            self.codes[rows] = self.values
        del self.rows, self.values

    def _coded(self, values):
        return np.asarray([self.vocabulary[v] for v in values if v in self.vocabulary], np.int32)

    def matches(self, op, values):
        """The bool mask of the rows whose value satisfies `op values` (rows without the field: False)."""
        if self.kind == "list":
            hit = np.isin(self.codes, self._coded(values))
            mask = np.zeros(self.num_rows, bool)
            mask[self.element_rows[hit]] = True
            return mask & self.present if op != "!=" else ~mask & self.present
        if self.kind == "string":
            mask = np.isin(self.codes, self._coded(values))
        elif op in ORDER_OPERATORS:
            with np.errstate(invalid="ignore"):
                mask = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}[op](
                    self.codes, values[0]
                )
        else:
            mask = np.isin(self.codes, np.asarray(values, self.codes.dtype))
        return ~mask & self.present if op == "!=" else mask & self.present


def _value_type(value):
    return "number" if metadata_type(value) == "number" else metadata_type(value)


class MetadataColumns:
    """The metadata of N documents, one column a field, and the rows a `Filter` allows.

    Args:
        ids: the documents' ids, in row order.
        metadata: per row, its metadata dict (`Corpus.metadata`), or None for documents without metadata.

    Attributes:
        ids, types (`{field: "string" | "number" | "boolean" | "list"}`).
        columns: `{field: column}`, each with `kind`, `present` (bool `[N]`), `codes` (int32 codes into
            `vocabulary`, `{value: code}`, for strings and lists; float64 or int8 values otherwise) and, for a
            list, `element_rows` (the row of each of its `codes`).

    Raises:
        DataError: a field whose values mix types, naming the two documents, or a number that does not fit a
            float64 (`beir.readers.fits_float64`), naming the document and field.
        UserError: `ids` a string, or `metadata` not one dict (or None) per id.

    Example:
    >>> columns = MetadataColumns(["d0", "d1"], [{"year": 2018}, {"year": 2021, "lang": "en"}])
    >>> columns.allowed(Filter("year >= 2019")).tolist()
    [False, True]
    """

    def __init__(self, ids, metadata):
        if isinstance(ids, (str, bytes)):
            raise UserError(f"MetadataColumns: ids must be a list of ids, got {type(ids).__name__}")
        self.ids = list(ids)
        self._positions = None
        metadata = [] if metadata is None else list(metadata)
        if metadata and len(metadata) != len(self.ids):
            raise UserError(f"MetadataColumns: {len(metadata)} metadata dicts for {len(self.ids)} ids")
        columns, first = {}, {}
        for row, fields in enumerate(metadata):
            if fields is not None and not isinstance(fields, dict):
                raise UserError(
                    f"MetadataColumns: the metadata of document {self.ids[row]!r} must be a dict or None, "
                    f"got {type(fields).__name__}"
                )
            for field, value in (fields or {}).items():
                kind = metadata_type(value)
                if kind is None:
                    continue
                if kind == "number" and not fits_float64(value):
                    raise DataError(
                        f"document {self.ids[row]!r} field `metadata.{field}` is a number that does not fit a float64"
                    )
                column = columns.get(field)
                if column is None:
                    column = columns[field] = _Column(kind, len(self.ids))
                    first[field] = self.ids[row]
                elif column.kind != kind:
                    raise DataError(
                        f"document {self.ids[row]!r} field `metadata.{field}` is a {kind}, but document "
                        f"{first[field]!r} has a {column.kind}: a field holds one type (rebuild the index)"
                    )
                column.add(row, value)
        for column in columns.values():
            column.freeze()
        self.columns = columns
        self.types = {field: column.kind for field, column in columns.items()}

    def check(self, filter):
        """Raises `UserError` naming the first clause of `filter` on an unknown field or of the wrong type."""
        for clause in filter.clauses:
            column = self.columns.get(clause.field)
            if column is None:
                known = ", ".join(sorted(self.columns)) or "none: its documents have no metadata"
                raise UserError(f"filter {clause.text!r}: unknown field {clause.field!r} (the index's fields: {known})")
            if clause.op in ORDER_OPERATORS and column.kind != "number":
                raise UserError(
                    f"filter {clause.text!r}: {clause.op} compares numbers, {clause.field!r} is a {column.kind}"
                )
            wanted = "string" if column.kind == "list" else column.kind
            for value in clause.values:
                if _value_type(value) != wanted and not (wanted == "string" and _value_type(value) == "number"):
                    raise UserError(
                        f"filter {clause.text!r}: {value!r} is a {_value_type(value)}, {clause.field!r} holds "
                        f"{column.kind if column.kind != 'list' else 'lists of strings'} (quote a string)"
                    )

    def allowed(self, filter):
        """The bool `[N]` mask of the rows `filter` allows (all of them for None).

        Raises:
            UserError: a clause on an unknown field or of the wrong type (`check`).
        """
        mask = np.ones(len(self.ids), bool)
        if filter is None:
            return mask
        self.check(filter)
        for clause in filter.clauses:
            column = self.columns[clause.field]
            values = {"string": clause.written, "list": clause.written, "boolean": clause.values}.get(column.kind)
            if values is None:  # a number's text read as the nearest float64, as the searcher's parser reads it
                values = [float(written) for written in clause.written]
            mask &= column.matches(clause.op, values)
        if filter.ids is not None:
            if self._positions is None:
                self._positions = {doc_id: row for row, doc_id in enumerate(self.ids)}
            listed = np.zeros(len(self.ids), bool)
            listed[[self._positions[i] for i in filter.ids if i in self._positions]] = True
            mask &= listed
        return mask
