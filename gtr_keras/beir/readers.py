"""Readers for BEIR collections (the texts that `gtr-keras encode` embeds: `text_inputs`; qrels checked
against a collection: `qrels_checks`).

A BEIR collection is a directory holding `corpus.jsonl` (or `corpus.jsonl.gz`)
with `{"_id", "title", "text"}` records, `queries.jsonl` with `{"_id", "text"}`
records and `qrels/<split>.tsv` with a `query-id  corpus-id  score` header.

Every problem with the input raises `DataError`, whose message starts with
`FILE:LINE:` and names the offending field, so a bad record can be found and
fixed without a debugger. Files are read through `gtr_keras.utils.text_files`.
"""

import collections.abc
import dataclasses
import json
import math
import os
from typing import Any

from gtr_keras.errors import DataError, UserError
from gtr_keras.utils import files
from gtr_keras.utils.text_files import (
    check_id_text,
    check_text,
    id_value,
    iter_jsonl,
    iter_tsv_rows,
    text_problem,
    text_value,
)

MAX_EXAMPLES = 5
# Relevance judgements: per query id, the relevance of each judged document id.
Qrels = dict[str, dict[str, int]]


@dataclasses.dataclass
class Corpus:
    """Documents of a collection, in file order.

    A `Corpus` given to `gtr_keras.Index` (or `build_index`, `update_index`) is held to the rule of a corpus
    file's records (`check_corpus`) before anything is encoded or written: a `UserError` names its row and field.

    Attributes:
        ids: document ids: strings (or integers, stored as strings), unique, not empty, without whitespace.
        titles: document titles, `""` where the record has none.
        texts: document bodies.
        metadata: per document, the `metadata` object of its record (`{}` where it has none), or None for
            a corpus read without them; its values are strings, numbers, booleans or lists of strings, each
            field of one type (`metadata_type`) in every document.

    Every string is valid Unicode (no lone surrogate).
    """

    ids: list[str]
    titles: list[str]
    texts: list[str]
    metadata: list[dict[str, Any]] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def joined(self) -> list[str]:
        """The strings BEIR embeds for each document: `"title text"`, stripped.

        Example:
        >>> Corpus(["d1"], ["A title"], ["Body."]).joined()
        ['A title Body.']
        """
        return [joined_document(title, text) for title, text in zip(self.titles, self.texts)]


def joined_document(title: str, text: str) -> str:
    """The string BEIR embeds for a document of `title` and `text` (`Corpus.joined`): `"title text"`, stripped.

    Example:
    >>> joined_document("", " Body.")
    'Body.'
    """
    return f"{title} {text}".strip()


def _check_unique(source, ids, numbers):
    """Raises `DataError` naming `source`'s repeated ids and their places (lines of a file, rows of a `Corpus`:
    `source` None)."""
    first_number = {}
    duplicates = []
    for doc_id, number in zip(ids, numbers):
        if doc_id in first_number:
            duplicates.append((doc_id, first_number[doc_id], number))
        else:
            first_number[doc_id] = number
    if duplicates:
        unit = "lines" if source is not None else "rows"
        examples = ", ".join(
            f"{doc_id!r} ({unit} {first} and {again})" for doc_id, first, again in duplicates[:MAX_EXAMPLES]
        )
        raise DataError(f"{source or 'Corpus'}: {len(duplicates)} duplicate `_id` value(s), e.g. {examples}")


METADATA_TYPES = ("string", "number", "boolean", "list")


def metadata_type(value):
    """The filter type of a metadata value (`"string"`, `"number"`, `"boolean"`, `"list"` of strings), or
    None for a value of no such type (null included).

    Example:
    >>> [metadata_type(v) for v in ("en", 2019, 0.5, True, ["a", "b"], None)]
    ['string', 'number', 'number', 'boolean', 'list', None]
    """
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "list"
    return None


def fits_float64(number):
    """Whether a number is a finite float64, as a number field keeps it: not a 401-digit integer, nor `1e400`
    (which JSON readers take as infinity), `Infinity` or `NaN`.

    Example:
    >>> [fits_float64(v) for v in (2019, 1.5e308, 10**400, float("inf"), float("nan"))]
    [True, True, False, False, False]
    """
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _place(source, number):
    """Where record `number` of `source` is, for messages: `FILE:LINE`, or `Corpus row N` (`source` None)."""
    return f"{source}:{number}" if source is not None else f"Corpus row {number}"


def record_metadata(source, number, doc_id, metadata, first):
    """The `metadata` of one document (`{}` for none, null values dropped), checked: an object of strings,
    numbers (finite float64s, `fits_float64`), booleans and lists of strings (every string, field names too,
    valid Unicode), each field of the type the first document that has it gives it.

    Args:
        source, number: where the record is, for messages: a file and its line, or None and a `Corpus` row.
        doc_id: the document's id.
        metadata: the record's `metadata` value.
        first: `{field: (type, id, source, number)}` of the documents read before, filled as fields are seen.

    Raises:
        DataError: a malformed `metadata` or a field of another type, naming the place, document and field.
    """
    if metadata is None:
        return {}
    where = _place(source, number)
    if not isinstance(metadata, dict):
        raise DataError(f"{where}: field `metadata` must be an object, got {type(metadata).__name__}")
    for field, value in metadata.items():
        if not isinstance(field, str):
            raise DataError(f"{where}: document {doc_id!r}: a `metadata` field name must be a string, got {field!r}")
        if text_problem(field):
            check_text(f"{where}: document {doc_id!r}: `metadata` field name {field!r}", field, DataError)
        kind = metadata_type(value)
        if kind is None and value is not None:
            raise DataError(
                f"{where}: document {doc_id!r} field `metadata.{field}` must be a string, "
                f"number, boolean or list of strings, got {json.dumps(value, default=repr)[:40]}"
            )
        if kind == "number" and not fits_float64(value):
            raise DataError(
                f"{where}: document {doc_id!r} field `metadata.{field}` is a number that does not fit a "
                "float64 (finite, at most 1.8e308 in size), which number fields hold"
            )
        for string in [value] if kind == "string" else value if kind == "list" else []:
            if text_problem(string):
                check_text(f"{where}: document {doc_id!r} field `metadata.{field}`", string, DataError)
        seen = first.setdefault(field, (kind, doc_id, source, number)) if kind else None
        if seen and seen[0] != kind:
            unit = "line" if source is not None else "row"
            place = f"{unit} {seen[3]}" if seen[2] == source else _place(seen[2], seen[3])
            raise DataError(
                f"{where}: document {doc_id!r} field `metadata.{field}` is a {kind}, but document {seen[1]!r} "
                f"({place}) has a {seen[0]}: a field holds one type"
            )
    return {field: value for field, value in metadata.items() if value is not None}


def document_values(source, number, doc_id, title, text, metadata, first, stored=False):
    """One document's `(id, title, text, metadata)`, checked by the one rule of documents, whoever gives them (a
    corpus file, a `Corpus`, the Beam pipeline): the id by `text_files.id_value` (a string or an integer, not
    empty, without whitespace), title and text strings (a missing title `""`), every string valid Unicode, and
    the metadata by `record_metadata`.

    Args:
        source, number: where the document is, for messages: a file and its line, or None and a `Corpus` row.
        doc_id, title, text, metadata: its values as given (`metadata` None: none).
        first: as `record_metadata` takes it, shared by the documents of one corpus.
        stored: the document is one an index stores: its id is held to the rule of ids that name stored
            documents (`check_id_text(reference=True)`), as older versions stored ids with whitespace unchecked.

    Raises:
        DataError: naming the place and the field.

    Example:
    >>> document_values("corpus.jsonl", 3, 7, None, "Lift.", {"year": 2019}, {})
    ('7', '', 'Lift.', {'year': 2019})
    """
    where = _place(source, number)
    doc_id = id_value(where, doc_id, reference=stored)
    title = text_value(where, title, "title", required=False)
    text = text_value(where, text, "text", required=True)
    return doc_id, title, text, record_metadata(source, number, doc_id, metadata, first)


def read_records(path, with_metadata=False, stored=False):
    """Reads `_id`, `title`, `text` (and, `with_metadata`, `metadata`) of every record (`document_values`, which
    takes `stored`), checking ids are unique."""
    ids, titles, texts, metadata, line_numbers = [], [], [], [], []
    first = {}
    for line_no, record in iter_jsonl(path):
        fields = record.get("metadata") if with_metadata else None
        values = (record.get(name) for name in ("_id", "title", "text"))
        values = document_values(path, line_no, *values, fields, first, stored)
        for column, value in zip((ids, titles, texts, metadata), values):
            column.append(value)
        line_numbers.append(line_no)
    _check_unique(path, ids, line_numbers)
    return Corpus(ids=ids, titles=titles, texts=texts, metadata=metadata if first else None)


def _column(corpus, name):
    column = getattr(corpus, name)
    if isinstance(column, (str, bytes, dict)) or not isinstance(column, collections.abc.Sized):
        raise UserError(f"Corpus.{name} must be a list (an item per document), got {type(column).__name__}")
    return list(column)


def check_corpus(corpus):
    """`corpus`, a `Corpus` given in Python, held to the rule of a corpus file's records (`document_values`):
    a checked copy, its ids strings, a missing title `""`, metadata None where no document has any.

    Raises:
        UserError: not a `Corpus`, or columns of other lengths; `DataError` (a `UserError`): a value a corpus
            file could not hold, or a repeated id, naming its row (`Corpus row 3`) and field.

    Example:
    >>> check_corpus(Corpus([7, "d8"], [None, "A title"], ["Lift.", "Drag."])).ids
    ['7', 'd8']
    >>> check_corpus(Corpus(["has space"], [""], ["x"]))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gtr_keras.errors.DataError: Corpus row 0: `_id` 'has space' holds whitespace, which TREC run files ...
    """
    if not isinstance(corpus, Corpus):
        raise UserError(f"a corpus is a gtr_keras.Corpus (or a corpus file), got {type(corpus).__name__}")
    names = ("ids", "titles", "texts") + (("metadata",) if corpus.metadata is not None else ())
    columns = [_column(corpus, name) for name in names]
    if len({len(column) for column in columns}) > 1:
        counts = ", ".join(f"{len(column)} {name}" for name, column in zip(names, columns))
        raise UserError(f"Corpus: {counts}; one of each per document")
    if corpus.metadata is None:
        columns.append([None] * len(columns[0]))
    first, checked = {}, ([], [], [], [])
    for row, values in enumerate(zip(*columns)):
        for column, value in zip(checked, document_values(None, row, *values, first)):
            column.append(value)
    _check_unique(None, checked[0], range(len(checked[0])))
    ids, titles, texts, fields = checked
    return Corpus(ids, titles, texts, fields if first else None)


CORPUS_FILES = ("corpus.jsonl", "corpus.jsonl.gz")


# The Cranfield collection bundled with the package (`gtr-keras demo`'s; assets/cranfield/ATTRIBUTION.md).
BUNDLED_COLLECTION_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "assets", "cranfield")


QUERIES_FILES = ("queries.jsonl", "queries.jsonl.gz")


def in_collection(path, names):
    """Returns `path` itself, or the first of `names` (e.g. `CORPUS_FILES`) found in directory `path`.

    Raises:
        DataError: `path` does not exist, or is a directory holding none of `names`.
    """
    path = os.fspath(path)
    if not files.isdir(path):
        if not files.exists(path):
            raise DataError(f"{path}: no such file or directory")
        return path
    # Names listed, not `exists` probed: TensorFlow's `ram://` counts every prefix of a file's path
    # (`corpus.jsonl` of `corpus.jsonl.gz`) as an existing directory.
    present = set(files.listdir(path))
    for name in names:
        if name in present:
            return os.path.join(path, name)
    raise DataError(f"{path}: directory has none of {', '.join(names)}")


def _read_collection_file(path, names, what, with_metadata=False):
    """The records of `path` (or of the first of `names` in it); at least one."""
    path = in_collection(path, names)
    records = read_records(path, with_metadata)
    if not records:
        raise DataError(f"{path}: no {what}")
    return records


def load_corpus(path: str | os.PathLike[str]) -> Corpus:
    """Loads the documents of a BEIR collection.

    Args:
        path: a BEIR directory (holding `corpus.jsonl` or `corpus.jsonl.gz`)
            or a corpus file. Each record needs `_id` (string or integer) and
            `text`; `title` and `metadata` (an object of strings, numbers,
            booleans and lists of strings: what filters search, docs/filters.md)
            are optional. Empty documents are kept. Invalid UTF-8 is replaced
            with U+FFFD and a `DataWarning`.

    Returns:
        A `Corpus` (with `metadata` where any record has a field there).

    Raises:
        DataError: a missing or unreadable file, a file with no record, a
            malformed record, a missing field, a duplicate `_id`, or a
            metadata field whose values mix types (naming the document and field).

    Example:
    >>> corpus = load_corpus("data/scifact")  # doctest: +SKIP
    >>> len(corpus), corpus.joined()[0][:20]  # doctest: +SKIP
    """
    return _read_collection_file(path, CORPUS_FILES, "documents", with_metadata=True)


def load_queries(path: str | os.PathLike[str]) -> dict[str, str]:
    """Loads the queries of a BEIR collection.

    Args:
        path: a BEIR directory (holding `queries.jsonl` or
            `queries.jsonl.gz`) or a queries file. Each record needs `_id`
            and `text`; other fields are ignored. Invalid UTF-8 is replaced
            with U+FFFD and a `DataWarning`.

    Returns:
        A dict from query id to query text, in file order.

    Raises:
        DataError: a missing or unreadable file, a file with no record, a
            malformed record, a missing field or a duplicate `_id`.

    Example:
    >>> load_queries("data/scifact")["1"]  # doctest: +SKIP
    '0-dimensional biomaterials show inductive properties.'
    """
    records = _read_collection_file(path, QUERIES_FILES, "queries")
    return dict(zip(records.ids, records.texts))


_QRELS_COLUMNS = ("query-id", "corpus-id", "score")


def qrels_file(directory, split):
    """`directory/qrels/<split>.tsv`, or a `DataError` listing the splits there."""
    qrels_dir = os.path.join(directory, "qrels")
    path = os.path.join(qrels_dir, f"{split}.tsv")
    if files.exists(path):
        return path
    if not files.isdir(qrels_dir):
        raise DataError(f"{path}: no such file (no qrels directory)")
    splits = sorted(name.removesuffix(".tsv") for name in files.listdir(qrels_dir) if name.endswith(".tsv"))
    raise DataError(f"{path}: no such file (splits there: {', '.join(splits) or 'none'})")


def evaluated_queries(qrels, path):
    """The ids of the queries with a document of grade 1 or more: the queries that BEIR's means (and
    `evaluate_run`'s) are over.

    Raises:
        DataError: naming `path` (the qrels file) when there is none: nothing to evaluate.

    Example:
    >>> evaluated_queries({"q1": {"d1": 1}, "q2": {"d2": 0}}, "qrels/test.tsv")
    ['q1']
    """
    evaluated = [qid for qid, judgements in qrels.items() if any(grade >= 1 for grade in judgements.values())]
    if not evaluated:
        raise DataError(f"{path}: no judgement of grade 1 or more: no query to evaluate")
    return evaluated


def load_qrels(path: str | os.PathLike[str], split: str = "test") -> Qrels:
    """Loads relevance judgements from a BEIR qrels TSV file.

    The file has three tab-separated columns, query id, document id and an
    integer score (negative grades, found in some TREC qrels, are kept), and
    normally a header row. The first row is a header when its third column
    is not an integer; its names must then be `query-id`, `corpus-id`,
    `score`, so a file whose columns are swapped is not read the wrong way.
    The file must be valid UTF-8: an id holding a replacement character would
    silently match no query or document.

    Args:
        path: a qrels `.tsv` file, or a BEIR directory, which is read from
            `qrels/<split>.tsv`.
        split: the split to read when `path` is a directory.

    Returns:
        A dict from query id to a dict from document id to integer score.

    Raises:
        DataError: a missing or unreadable file (listing the splits there),
            invalid UTF-8, a header with other column names, a row with the
            wrong number of columns, a non-integer score, a (query, document)
            pair judged twice, or no judgement at all.

    Example:
    >>> load_qrels("data/scifact", "test")["1"]  # doctest: +SKIP
    {'31715818': 1}
    """
    path = os.fspath(path)
    if files.isdir(path):
        path = qrels_file(path, split)
    qrels: Qrels = {}
    first_line: dict[tuple[str, str], int] = {}
    rows = iter_tsv_rows(path, _QRELS_COLUMNS)
    for row_index, (line_no, columns) in enumerate(rows):
        query_id, doc_id, score = columns
        try:
            score = int(score)
        except ValueError:
            if row_index == 0:
                if tuple(columns) != _QRELS_COLUMNS:
                    raise DataError(
                        f"{path}:{line_no}: header names columns "
                        f"({', '.join(columns)}); expected "
                        f"{', '.join(_QRELS_COLUMNS)}"
                    ) from None
                continue
            raise DataError(f"{path}:{line_no}: field `score` must be an integer, got {score!r}") from None
        check_id_text(f"{path}:{line_no}", query_id, "query-id")
        check_id_text(f"{path}:{line_no}", doc_id, "corpus-id")
        pair = (query_id, doc_id)
        if pair in first_line:
            raise DataError(
                f"{path}:{line_no}: query {query_id!r} and document "
                f"{doc_id!r} already judged on line {first_line[pair]}"
            )
        first_line[pair] = line_no
        qrels.setdefault(query_id, {})[doc_id] = score
    if not qrels:
        raise DataError(f"{path}: no judgements")
    return qrels
