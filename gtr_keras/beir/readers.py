"""Readers for BEIR collections (the texts that `gtr-keras encode` embeds: `text_inputs`; qrels checked
against a collection: `qrels_checks`).

A BEIR collection is a directory holding `corpus.jsonl` (or `corpus.jsonl.gz`)
with `{"_id", "title", "text"}` records, `queries.jsonl` with `{"_id", "text"}`
records and `qrels/<split>.tsv` with a `query-id  corpus-id  score` header.

Every problem with the input raises `DataError`, whose message starts with
`FILE:LINE:` and names the offending field, so a bad record can be found and
fixed without a debugger. Files are read through `gtr_keras.utils.text_files`.
"""

import dataclasses
import json
import math
import os
from typing import Any

from gtr_keras.errors import DataError
from gtr_keras.utils import files
from gtr_keras.utils.text_files import (
    check_id_text,
    id_field,
    iter_jsonl,
    iter_tsv_rows,
    str_field,
)

MAX_EXAMPLES = 5
# Relevance judgements: per query id, the relevance of each judged document id.
Qrels = dict[str, dict[str, int]]


@dataclasses.dataclass
class Corpus:
    """Documents of a collection, in file order.

    Attributes:
        ids: document ids.
        titles: document titles, `""` where the record has none.
        texts: document bodies.
        metadata: per document, the `metadata` object of its record (`{}` where it has none), or None for
            a corpus read without them; its values are strings, numbers, booleans or lists of strings, each
            field of one type (`metadata_type`) in every document.
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
        return [f"{title} {text}".strip() for title, text in zip(self.titles, self.texts)]


def _check_unique(path, ids, line_numbers):
    first_line = {}
    duplicates = []
    for doc_id, line_no in zip(ids, line_numbers):
        if doc_id in first_line:
            duplicates.append((doc_id, first_line[doc_id], line_no))
        else:
            first_line[doc_id] = line_no
    if duplicates:
        examples = ", ".join(
            f"{doc_id!r} (lines {first} and {again})" for doc_id, first, again in duplicates[:MAX_EXAMPLES]
        )
        raise DataError(f"{path}: {len(duplicates)} duplicate `_id` value(s), e.g. {examples}")


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


def record_metadata(path, line_no, doc_id, record, first):
    """The `metadata` of one corpus record (`{}` for none, null values dropped), checked: an object of strings,
    numbers (finite float64s, `fits_float64`), booleans and lists of strings, each field of the type the first
    document that has it gives it.

    Args:
        path, line_no, doc_id: where the record is, for messages.
        record: the parsed line.
        first: `{field: (type, id, path, line)}` of the documents read before, filled as fields are seen.

    Raises:
        DataError: a malformed `metadata` or a field of another type, naming the file, line, document and field.
    """
    metadata = record.get("metadata")
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise DataError(f"{path}:{line_no}: field `metadata` must be an object, got {type(metadata).__name__}")
    for field, value in metadata.items():
        kind = metadata_type(value)
        if kind is None and value is not None:
            raise DataError(
                f"{path}:{line_no}: document {doc_id!r} field `metadata.{field}` must be a string, "
                f"number, boolean or list of strings, got {json.dumps(value)[:40]}"
            )
        if kind == "number" and not fits_float64(value):
            raise DataError(
                f"{path}:{line_no}: document {doc_id!r} field `metadata.{field}` is a number that does not fit a "
                "float64 (finite, at most 1.8e308 in size), which number fields hold"
            )
        seen = first.setdefault(field, (kind, doc_id, path, line_no)) if kind else None
        if seen and seen[0] != kind:
            place = f"line {seen[3]}" if seen[2] == path else f"{seen[2]}:{seen[3]}"
            raise DataError(
                f"{path}:{line_no}: document {doc_id!r} field `metadata.{field}` is a {kind}, but "
                f"document {seen[1]!r} ({place}) has a {seen[0]}: a field holds one type"
            )
    return {field: value for field, value in metadata.items() if value is not None}


def read_records(path, with_metadata=False):
    """Reads `_id`, `title`, `text` (and, `with_metadata`, `metadata`) of every record, checking ids are unique."""
    ids, titles, texts, metadata, line_numbers = [], [], [], [], []
    first = {}
    for line_no, record in iter_jsonl(path):
        ids.append(id_field(path, line_no, record))
        titles.append(str_field(path, line_no, record, "title", required=False))
        texts.append(str_field(path, line_no, record, "text", required=True))
        if with_metadata:
            metadata.append(record_metadata(path, line_no, ids[-1], record, first))
        line_numbers.append(line_no)
    _check_unique(path, ids, line_numbers)
    return Corpus(ids=ids, titles=titles, texts=texts, metadata=metadata if first else None)


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
        check_id_text(path, line_no, query_id, "query-id")
        check_id_text(path, line_no, doc_id, "corpus-id")
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
