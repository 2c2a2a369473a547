"""Line-oriented text files, local or through `tf.io.gfile` (`gs://`, `ram://`), `*.gz` gunzipped on
the fly: lines, JSONL records and TSV rows, with errors that name `FILE:LINE:` and the field; and the one rule
of the texts and ids gtr-keras takes, whether from a file, from Python or over HTTP.

Invalid UTF-8 raises `DataError` where an id depends on it (qrels, run files) and is
replaced with U+FFFD, with a `DataWarning` naming file and line, where it is text.

A text is valid Unicode: no lone surrogate (U+D800 to U+DFFF alone), which UTF-8 cannot encode and JSON's
`\\ud800` escape or a Python string can hold. A document's id is a text that is not empty and holds no
whitespace (a TREC run line, `qid Q0 docid rank score tag`, cannot keep it) and no NUL. An id that names a
document already stored (one to delete, one a filter allows) may hold whitespace but no line break: older
versions stored such ids unchecked, and deleting them is how such an index is repaired. Each caller names
where the value is (`FILE:LINE`, `Corpus row 3`, `queries[0]`, a request's field) and gets the same phrase of
the problem (`text_problem`, `id_problem`): the readers of corpus files, `Corpus`, `Index`, the Beam pipeline,
the encoders and rerankers, filters and `gtr-keras serve`.
"""

import codecs
import gzip
import io
import json
import os
import re
import warnings
import zlib

import numpy as np

from gtr_keras.errors import DataError, DataWarning, UserError
from gtr_keras.utils import files
from gtr_keras.utils.files import tf  # TensorFlow on first use


def _decode(path, line_no, raw, errors):
    """Decodes one line; invalid UTF-8 raises, or is replaced with a `DataWarning`."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        problem = f"{path}:{line_no}: invalid UTF-8 ({e.reason} at byte {e.start})"
        if errors == "strict":
            raise DataError(problem) from None
        warnings.warn(
            f"{problem}; undecodable bytes replaced with U+FFFD",
            DataWarning,
            stacklevel=4,
        )
        return raw.decode("utf-8", errors="replace")


class _GFileReader(io.RawIOBase):
    """A `tf.io.gfile.GFile` as a raw stream, so that `io.BufferedReader` splits its lines in large reads
    instead of `GFile.readline`'s one call a line."""

    def __init__(self, gfile):
        super().__init__()
        self._gfile = gfile

    def readable(self):
        return True

    def readinto(self, buffer):
        data = self._gfile.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self):
        if not self.closed:
            self._gfile.close()
        super().close()


def _open_lines(path):
    """A buffered binary reader of `path` (local, `gs://`, `ram://`, ...), gunzipped when named `*.gz`."""
    if path.endswith(".gz"):
        return files.open_decompressed(path)  # GzipFile buffers its reads itself
    return io.BufferedReader(_GFileReader(files.open(path, "rb")), buffer_size=1 << 20)


def _read_error(path, line_no, error):
    """The `DataError` for a file that cannot be opened or read to its end."""
    after = f" after line {line_no}" if line_no else ""
    if isinstance(error, (FileNotFoundError, tf.errors.NotFoundError)):
        return DataError(f"{path}: no such file")
    if isinstance(error, IsADirectoryError):
        return DataError(f"{path}: is a directory, expected a file")
    if isinstance(error, (PermissionError, tf.errors.PermissionDeniedError)):
        return DataError(f"{path}: permission denied")
    if isinstance(error, tf.errors.OpError):
        reason = (error.message.strip().splitlines() or [type(error).__name__])[0]
        return DataError(f"{path}: cannot read{after} ({reason})")
    if isinstance(error, EOFError):
        return DataError(f"{path}: truncated gzip data{after}")
    if isinstance(error, gzip.BadGzipFile) and not line_no and str(error).startswith("Not a gzipped file"):
        return DataError(f"{path}: not a gzip file")
    if isinstance(error, (gzip.BadGzipFile, zlib.error)):
        return DataError(f"{path}: corrupt gzip data{after} ({error})")
    return DataError(f"{path}: cannot read{after} ({error})")


def iter_lines(path, errors="strict"):
    """Yields `(line_no, line)` for every line of a UTF-8 text file.

    Lines end at `"\\n"`. A UTF-8 byte order mark at the start of the file is
    dropped.

    Args:
        path: a text file, local or `gs://...` (any `tf.io.gfile` path);
            gzip-compressed when its name ends with `.gz`.
        errors: what a line that is not valid UTF-8 gets. `"strict"` raises
            `DataError`, for files of ids, where a replaced character would
            make an id silently match nothing. `"replace"` decodes it with
            the invalid bytes replaced by U+FFFD and emits a `DataWarning`
            naming the file and line, for files of texts.

    Yields:
        `(line_no, str)` with 1-based line numbers and the line ending kept.

    Raises:
        DataError: a missing or unreadable file, a directory, a file named
            `.gz` that is not gzip or is truncated or corrupt, or (with
            `errors="strict"`) a line that is not valid UTF-8.

    Example:
    >>> for line_no, line in iter_lines("notes.txt.gz", errors="replace"):  # doctest: +SKIP
    ...     print(line_no, line.rstrip("\\n"))
    """
    path = os.fspath(path)
    line_no = 0
    try:
        with _open_lines(path) as f:
            for line_no, raw in enumerate(f, start=1):
                if line_no == 1:
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                yield line_no, _decode(path, line_no, raw, errors)
    except (OSError, EOFError, zlib.error, tf.errors.OpError) as e:
        raise _read_error(path, line_no, e) from None


def iter_jsonl(path):
    """Yields `(line_no, record)` for every non-blank line of a JSON Lines file.

    A line that is not valid UTF-8 is decoded with the invalid bytes replaced
    by U+FFFD and a `DataWarning` naming the file and line, as `.txt` input
    is; a UTF-8 byte order mark at the start of the file is dropped. An
    integer of more digits than Python converts (4,300) is read as a float,
    infinite, for the reader of its field to refuse.

    Args:
        path: a `.jsonl` file, or a gzip-compressed `.jsonl.gz` file.

    Yields:
        `(line_no, dict)` with 1-based line numbers.

    Raises:
        DataError: the file cannot be read (see `iter_lines`), or a line is
            not valid JSON or not an object.

    Example:
    >>> [record["_id"] for _, record in iter_jsonl("queries.jsonl")]  # doctest: +SKIP
    ['q1', 'q2']
    """
    for line_no, line in iter_lines(path, errors="replace"):
        if not line.strip():
            continue
        try:
            record = _json_object(line)
        except (json.JSONDecodeError, RecursionError) as e:  # RecursionError: nested deeper than Python's stack
            raise DataError(f"{path}:{line_no}: malformed JSON ({e})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{line_no}: expected a JSON object, got {type(record).__name__}")
        yield line_no, record


def _json_object(line):
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer of more digits than Python converts: read as a float (infinite)
        return json.loads(line, parse_int=_integer_or_float)


def _integer_or_float(digits):
    try:
        return int(digits)
    except ValueError:
        return float(digits)


_SURROGATE = re.compile("[\ud800-\udfff]")
# What an id may not hold: whitespace (`\s` is what `str.isspace` calls whitespace), NUL, a lone surrogate.
_NOT_IN_IDS = re.compile("[\\s\0\ud800-\udfff]")


def text_problem(text):
    """What makes the string `text` no text gtr-keras takes (a lone surrogate, named with its place), or None.

    Example:
    >>> text_problem("lift"), text_problem("lift \\udcff")
    (None, 'a lone surrogate (U+DCFF at character 5), which UTF-8 cannot encode')
    """
    match = _SURROGATE.search(text)
    if match is None:
        return None
    return f"a lone surrogate (U+{ord(match.group()):04X} at character {match.start()}), which UTF-8 cannot encode"


def check_text(where, text, error=UserError):
    """`text`, a string, unless it holds a lone surrogate (`text_problem`): then `error` naming `where`.

    Example:
    >>> check_text("queries[0]", "lift on a wing")
    'lift on a wing'
    """
    problem = text_problem(text)
    if problem is not None:
        raise error(f"{where}: {problem}; give valid Unicode text")
    return text


def id_problem(value, reference=False):
    """What makes the string `value` no id (`check_id_text` raises it), or None.

    Example:
    >>> id_problem("d 1"), id_problem("d 1", reference=True)
    ('holds whitespace, which TREC run files (and so evaluation) cannot keep', None)
    """
    if not value:
        return "is empty"
    if _NOT_IN_IDS.search(value) is None:
        return None
    problem = text_problem(value)
    if problem is not None:
        return f"holds {problem}"
    if "\0" in value:
        return "holds a NUL character"
    if reference and ("\n" in value or "\r" in value):
        return "holds a line break"
    return None if reference else "holds whitespace, which TREC run files (and so evaluation) cannot keep"


def check_id_text(where, value, field, error=DataError, reference=False):
    """`value`, an id (a string), unless it breaks the rule of ids: `error` naming `where` and `field` then.

    Args:
        where: where the id is (`FILE:LINE`, `Corpus row 3`).
        value: the id.
        field: what the id is, for the message (`` `_id` ``, `query-id`, `id`).
        error: the exception class raised.
        reference: the id names a document already stored (to delete, to allow): whitespace is kept (but for
            line breaks), as older versions stored such ids.

    Example:
    >>> check_id_text("run.txt:2", "d 1", "corpus-id")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gtr_keras.errors.DataError: run.txt:2: corpus-id 'd 1' holds whitespace, which TREC run files (and so ...
    """
    problem = id_problem(value, reference)
    if problem is not None:
        raise error(f"{where}: {field} {value!r} {problem}")
    return value


def id_value(where, value, field="`_id`", error=DataError, reference=False):
    """A document's id (a string, or an integer as JSON may write one) as a string, checked by `check_id_text`
    (`reference`: as it takes it).

    Raises:
        `error`: naming `where` and `field`, for None (missing), another type (a bool, a float, bytes), or an id
            that breaks the rule.

    Example:
    >>> id_value("corpus.jsonl:3", 7)
    '7'
    """
    if value is None:
        raise error(f"{where}: missing field {field}")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise error(f"{where}: field {field} must be a string or an integer, got {type(value).__name__}")
    return check_id_text(where, str(value), field, error, reference)


def text_value(where, value, field, required, error=DataError):
    """A document's text field (`title`, `text`) as a string: `""` for a missing optional one.

    Raises:
        `error`: naming `where` and the field, for a missing required one, another type than a string, or a text
            that holds a lone surrogate.

    Example:
    >>> text_value("corpus.jsonl:3", None, "title", required=False)
    ''
    """
    if value is None:
        if required:
            raise error(f"{where}: missing field `{field}`")
        return ""
    if not isinstance(value, str):
        raise error(f"{where}: field `{field}` must be a string, got {type(value).__name__}")
    if _SURROGATE.search(value) is not None:
        check_text(f"{where}: field `{field}`", value, error)
    return value


def id_field(path, line_no, record):
    """The `_id` of a JSON Lines record, checked by the rule of ids (`id_value`)."""
    return id_value(f"{path}:{line_no}", record.get("_id"))


def str_field(path, line_no, record, field, required):
    """A string field of a JSON Lines record (`""` for a missing optional one), checked by the rule of texts
    (`text_value`: a string, without a lone surrogate)."""
    return text_value(f"{path}:{line_no}", record.get(field), field, required)


def iter_tsv_rows(path, names):
    """Yields `(line_no, columns)` of a tab-separated file, blank lines skipped.

    Args:
        path: a `.tsv` or `.tsv.gz` file.
        names: the expected column names (for the error message).

    Yields:
        `(line_no, list of str)` with 1-based line numbers.

    Raises:
        DataError: the file cannot be read or is not valid UTF-8 (see
            `iter_lines`), or a row has another number of columns; the
            message names the file and line.
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


def query_inputs(queries):
    """`(vectors, texts)`: `queries` as float32 `[n, D]` and None when they are vectors (a float array), or
    None and a list of strings when they are texts (valid Unicode); a `UserError` for anything else."""
    if isinstance(queries, (str, bytes)):
        raise UserError("queries: a list of texts (or an array of query vectors), not one string")
    if isinstance(queries, np.ndarray) and queries.dtype.kind == "f":
        if queries.ndim != 2:
            raise UserError(f"query vectors: a [queries, D] array, got shape {queries.shape}")
        return queries.astype(np.float32, copy=False), None
    texts = list(queries)
    for number, text in enumerate(texts):
        if not isinstance(text, str):
            raise UserError(
                f"queries: a list of texts or a float array of query vectors, got a {type(text).__name__} in the list"
            )
        check_text(f"queries[{number}]", text)
    return None, texts
