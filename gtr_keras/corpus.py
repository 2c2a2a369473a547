"""Readers for plain-text inputs and BEIR collections.

A BEIR collection is a directory holding `corpus.jsonl` (or `corpus.jsonl.gz`)
with `{"_id", "title", "text"}` records, `queries.jsonl` with `{"_id", "text"}`
records and `qrels/<split>.tsv` with a `query-id  corpus-id  score` header.

Every problem with the input raises `DataError`, whose message starts with
`FILE:LINE:` and names the offending field, so a bad record can be found and
fixed without a debugger.
"""

import dataclasses
import gzip
import json
import os
import warnings

from gtr_keras.errors import DataError, DataWarning  # noqa: F401  (raised by the readers)

_MAX_EXAMPLES = 5


@dataclasses.dataclass
class Corpus:
    """Documents of a collection, in file order.

    Attributes:
        ids: document ids.
        titles: document titles, `""` where the record has none.
        texts: document bodies.
    """

    ids: list
    titles: list
    texts: list

    def __len__(self):
        return len(self.ids)

    def joined(self):
        """The strings BEIR embeds for each document: `"title text"`, stripped.

        Example:
        >>> Corpus(["d1"], ["A title"], ["Body."]).joined()
        ['A title Body.']
        """
        return [
            f"{title} {text}".strip()
            for title, text in zip(self.titles, self.texts)
        ]


def iter_lines(path):
    """Yields `(line_no, line)` for every line of a UTF-8 text file.

    Args:
        path: a text file; gzip-compressed when its name ends with `.gz`.

    Yields:
        `(line_no, str)` with 1-based line numbers and the line ending kept.

    Raises:
        DataError: a line is not valid UTF-8.
    """
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                yield line_no, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{line_no}: invalid UTF-8 ({e})") from None


def iter_jsonl(path):
    """Yields `(line_no, record)` for every non-blank line of a JSON Lines file.

    Args:
        path: a `.jsonl` file, or a gzip-compressed `.jsonl.gz` file.

    Yields:
        `(line_no, dict)` with 1-based line numbers.

    Raises:
        DataError: a line is not valid UTF-8, not valid JSON, or not an object.
    """
    for line_no, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{line_no}: malformed JSON ({e})") from None
        if not isinstance(record, dict):
            raise DataError(
                f"{path}:{line_no}: expected a JSON object, got "
                f"{type(record).__name__}"
            )
        yield line_no, record


def id_field(path, line_no, record):
    value = record.get("_id")
    if value is None:
        raise DataError(f"{path}:{line_no}: missing field `_id`")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(
            f"{path}:{line_no}: field `_id` must be a string or an integer, got "
            f"{type(value).__name__}"
        )
    return str(value)


def str_field(path, line_no, record, field, required):
    value = record.get(field)
    if value is None:
        if required:
            raise DataError(f"{path}:{line_no}: missing field `{field}`")
        return ""
    if not isinstance(value, str):
        raise DataError(
            f"{path}:{line_no}: field `{field}` must be a string, got "
            f"{type(value).__name__}"
        )
    return value


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
            f"{doc_id!r} (lines {first} and {again})"
            for doc_id, first, again in duplicates[:_MAX_EXAMPLES]
        )
        raise DataError(
            f"{path}: {len(duplicates)} duplicate `_id` value(s), e.g. {examples}"
        )


def _read_records(path):
    """Reads `_id`, `title`, `text` of every record, checking ids are unique."""
    ids, titles, texts, line_numbers = [], [], [], []
    for line_no, record in iter_jsonl(path):
        ids.append(id_field(path, line_no, record))
        titles.append(str_field(path, line_no, record, "title", required=False))
        texts.append(str_field(path, line_no, record, "text", required=True))
        line_numbers.append(line_no)
    _check_unique(path, ids, line_numbers)
    return Corpus(ids=ids, titles=titles, texts=texts)


def _in_collection(path, names):
    """Returns `path` itself, or the first of `names` found in directory `path`."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file or directory")
        return path
    for name in names:
        candidate = os.path.join(path, name)
        if os.path.exists(candidate):
            return candidate
    raise FileNotFoundError(f"{path}: directory has none of {', '.join(names)}")


def load_corpus(path):
    """Loads the documents of a BEIR collection.

    Args:
        path: a BEIR directory (holding `corpus.jsonl` or `corpus.jsonl.gz`)
            or a corpus file. Each record needs `_id` (string or integer) and
            `text`; `title` is optional. Empty documents are kept.

    Returns:
        A `Corpus`.

    Raises:
        DataError: malformed record, missing field or duplicate `_id`.

    Example:
    >>> corpus = load_corpus("data/scifact")  # doctest: +SKIP
    >>> len(corpus), corpus.joined()[0][:20]  # doctest: +SKIP
    """
    return _read_records(_in_collection(path, ("corpus.jsonl", "corpus.jsonl.gz")))


def load_queries(path):
    """Loads the queries of a BEIR collection.

    Args:
        path: a BEIR directory (holding `queries.jsonl`) or a queries file.
            Each record needs `_id` and `text`; other fields are ignored.

    Returns:
        A dict from query id to query text, in file order.

    Raises:
        DataError: malformed record, missing field or duplicate `_id`.
    """
    records = _read_records(
        _in_collection(path, ("queries.jsonl", "queries.jsonl.gz"))
    )
    return dict(zip(records.ids, records.texts))


def iter_tsv_rows(path, names):
    """Yields `(line_no, columns)` of a tab-separated file, blank lines skipped.

    Args:
        path: a `.tsv` or `.tsv.gz` file.
        names: the expected column names (for the error message).

    Raises:
        DataError: a row with another number of columns, naming file and line.
    """
    for line_no, line in iter_lines(path):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) != len(names):
            raise DataError(
                f"{path}:{line_no}: expected {len(names)} tab-separated columns "
                f"({', '.join(names)}), got {len(columns)}"
            )
        yield line_no, columns


def load_qrels(path, split="test"):
    """Loads relevance judgements from a BEIR qrels TSV file.

    The file has three tab-separated columns, query id, document id and an
    integer score, and normally a header row. The first row is taken as a
    header when its third column is not an integer.

    Args:
        path: a qrels `.tsv` file, or a BEIR directory, which is read from
            `qrels/<split>.tsv`.
        split: the split to read when `path` is a directory.

    Returns:
        A dict from query id to a dict from document id to integer score.

    Raises:
        DataError: a row with the wrong number of columns, a non-integer
            score, or a (query, document) pair judged twice.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "qrels", f"{split}.tsv")
    qrels = {}
    first_line = {}
    seen_row = False
    for line_no, (query_id, doc_id, score) in iter_tsv_rows(path, ("query-id", "corpus-id", "score")):
        try:
            score = int(score)
        except ValueError:
            if not seen_row:
                seen_row = True
                continue
            raise DataError(
                f"{path}:{line_no}: field `score` must be an integer, got "
                f"{score!r}"
            ) from None
        seen_row = True
        pair = (query_id, doc_id)
        if pair in first_line:
            raise DataError(
                f"{path}:{line_no}: query {query_id!r} and document "
                f"{doc_id!r} already judged on line {first_line[pair]}"
            )
        first_line[pair] = line_no
        qrels.setdefault(query_id, {})[doc_id] = score
    return qrels


def _read_text_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    texts = []
    for line_no, raw in enumerate(lines, start=1):
        raw = raw.removesuffix(b"\r")
        if line_no == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            text = raw.decode("utf-8", errors="replace")
            warnings.warn(
                f"{path}:{line_no}: invalid UTF-8 ({e.reason} at byte {e.start}); "
                "undecodable bytes replaced with U+FFFD",
                DataWarning,
                stacklevel=3,
            )
        if "\0" in text:
            warnings.warn(
                f"{path}:{line_no}: line contains NUL byte(s); kept in the text",
                DataWarning,
                stacklevel=3,
            )
        texts.append(text)
    return [str(i) for i in range(1, len(texts) + 1)], texts


def read_texts(path):
    """Reads the texts to embed from a file, choosing the reader by file name.

    * `*.txt`: one text per line; the id of a text is its 1-based line number.
      Lines are split on `"\\n"` and a trailing `"\\r"` is removed; blank lines
      are kept as empty texts so ids stay equal to line numbers, and a UTF-8
      byte order mark at the start of the file is dropped. A line that is not
      valid UTF-8 is decoded with invalid bytes replaced by U+FFFD, and a line
      holding NUL bytes keeps them; both emit a `DataWarning` naming the file
      and line. An empty file gives no texts.
    * `queries.jsonl[.gz]`: BEIR queries, `(ids, texts)`.
    * `corpus.jsonl[.gz]`, or any other `*.jsonl[.gz]` where some record has a
      `title`: BEIR documents, `(ids, Corpus.joined())`.
    * any other `*.jsonl[.gz]`: records with `_id` and `text`, `(ids, texts)`.

    Args:
        path: the input file.

    Returns:
        `(ids, texts)`, two lists of strings of equal length.

    Raises:
        DataError: unsupported file name or malformed record.

    Example:
    >>> ids, texts = read_texts("sentences.txt")  # doctest: +SKIP
    """
    path = os.fspath(path)
    name = os.path.basename(path)
    if name.endswith(".txt"):
        return _read_text_lines(path)
    if not name.endswith((".jsonl", ".jsonl.gz")):
        raise DataError(
            f"{path}: unsupported input; expected a .txt, .jsonl or .jsonl.gz file"
        )
    records = _read_records(path)
    is_corpus = name.startswith("corpus.") or (
        not name.startswith("queries.") and any(records.titles)
    )
    return records.ids, (records.joined() if is_corpus else records.texts)


@dataclasses.dataclass
class QrelsReport:
    """What `check_qrels` removed from the judgements.

    Attributes:
        num_queries: queries in the qrels before filtering.
        num_judgements: judgements in the qrels before filtering.
        unknown_query_ids: judged queries missing from the queries, in order.
        unknown_doc_ids: judged documents missing from the corpus, in order.
        num_dropped_judgements: judgements removed for either reason.
    """

    num_queries: int
    num_judgements: int
    unknown_query_ids: list
    unknown_doc_ids: list
    num_dropped_judgements: int

    @property
    def ok(self):
        """True when every judged query and document is known."""
        return not (self.unknown_query_ids or self.unknown_doc_ids)

    def __str__(self):
        if self.ok:
            return (
                f"qrels: all {self.num_queries} queries and "
                f"{self.num_judgements} judgements match the collection"
            )
        problems = []
        for ids, what in (
            (self.unknown_query_ids, "query id(s) not in the queries"),
            (self.unknown_doc_ids, "document id(s) not in the corpus"),
        ):
            if ids:
                examples = ", ".join(repr(i) for i in ids[:_MAX_EXAMPLES])
                problems.append(f"{len(ids)} {what} (e.g. {examples})")
        return (
            f"qrels: {'; '.join(problems)}; dropped "
            f"{self.num_dropped_judgements} of {self.num_judgements} judgements"
        )


def check_qrels(qrels, corpus_ids, query_ids):
    """Drops judgements that refer to unknown queries or documents.

    Evaluation goes on with what is left; the report says what was dropped.
    Queries left with no judgement are removed.

    Args:
        qrels: dict from query id to a dict from document id to score.
        corpus_ids: the ids of the corpus documents.
        query_ids: the ids of the queries.

    Returns:
        `(filtered_qrels, QrelsReport)`.

    Example:
    >>> qrels, report = check_qrels({"q1": {"d1": 1, "d9": 1}}, ["d1"], ["q1"])
    >>> qrels
    {'q1': {'d1': 1}}
    >>> report.unknown_doc_ids
    ['d9']
    """
    corpus_ids = set(corpus_ids)
    query_ids = set(query_ids)
    filtered = {}
    unknown_queries = []
    unknown_docs = {}
    num_judgements = 0
    num_kept = 0
    for query_id, judgements in qrels.items():
        num_judgements += len(judgements)
        if query_id not in query_ids:
            unknown_queries.append(query_id)
            continue
        kept = {}
        for doc_id, score in judgements.items():
            if doc_id in corpus_ids:
                kept[doc_id] = score
            else:
                unknown_docs.setdefault(doc_id, None)
        if kept:
            filtered[query_id] = kept
            num_kept += len(kept)
    report = QrelsReport(
        num_queries=len(qrels),
        num_judgements=num_judgements,
        unknown_query_ids=unknown_queries,
        unknown_doc_ids=list(unknown_docs),
        num_dropped_judgements=num_judgements - num_kept,
    )
    return filtered, report
