"""The texts that `gtr-keras encode` embeds: `read_texts` reads lines of a `.txt` file, BEIR queries or
documents, or JSON Lines records, by the file's name.
"""

import os
import warnings

from gtr_keras.beir.readers import read_records
from gtr_keras.errors import DataError, DataWarning
from gtr_keras.utils.text_files import (
    iter_lines,
)


def _read_text_lines(path):
    texts = []
    for line_no, line in iter_lines(path, errors="replace"):
        text = line.removesuffix("\n").removesuffix("\r")
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
      are kept as empty texts so ids stay equal to line numbers. A line
      holding NUL bytes keeps them, with a `DataWarning` naming the file and
      line. An empty file gives no texts.
    * `queries.jsonl[.gz]`: BEIR queries, `(ids, texts)`.
    * `corpus.jsonl[.gz]`, or any other `*.jsonl[.gz]` where some record has a
      `title`: BEIR documents, `(ids, Corpus.joined())`.
    * any other `*.jsonl[.gz]`: records with `_id` and `text`, `(ids, texts)`.

    Every kind is decoded alike: a UTF-8 byte order mark at the start of the
    file is dropped, and a line that is not valid UTF-8 is decoded with the
    invalid bytes replaced by U+FFFD and a `DataWarning` naming the file and
    line. An empty `.jsonl` file gives no texts either.

    Args:
        path: the input file.

    Returns:
        `(ids, texts)`, two lists of strings of equal length.

    Raises:
        DataError: unsupported file name, a missing or unreadable file, a
            broken gzip file, or a malformed record.

    Example:
    >>> ids, texts = read_texts("sentences.txt")  # doctest: +SKIP
    """
    path = os.fspath(path)
    name = os.path.basename(path)
    if name.endswith(".txt"):
        return _read_text_lines(path)
    if not name.endswith((".jsonl", ".jsonl.gz")):
        raise DataError(f"{path}: unsupported input; expected a .txt, .jsonl or .jsonl.gz file")
    records = read_records(path)
    is_corpus = name.startswith("corpus.") or (not name.startswith("queries.") and any(records.titles))
    return records.ids, (records.joined() if is_corpus else records.texts)
