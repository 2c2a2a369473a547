"""Training examples, (query, positive, hard negatives), read from their sources.

Sources (`TrainingData.format`; by default chosen from the path):

- `"jsonl"` (`*.jsonl`, `*.jsonl.gz`): one example a line,
  `{"query": str, "positive": str, "negatives": [str, ...]}`, with optional
  `"query_id"`, `"positive_id"` and `"negative_ids"` (a list as long as
  `"negatives"`). `"negatives"` may be missing (no hard negatives).
- `"beir"` (a directory): a BEIR collection, `qrels/<split>.tsv` giving one
  example per (query, document with score > 0), optionally with hard negatives
  from a mined-negatives JSONL file, `{"query_id": ..., "negative_ids": [...]}`
  a line, as `gtr-keras mine` writes it. Documents are embedded as
  `"title text"`; mined documents judged relevant to the query are left out.
- `"msmarco"` (`*.tsv`, `*.tsv.gz`): MS MARCO triples, `query \\t positive \\t
  negative` a line.
- `"tfrecord"` (`*.tfrecord`, `*.tfrecords`, `*.tfrecord.gz`): `tf.train.Example`
  records written by `write_tfrecord` (GZIP-compressed when the name ends in `.gz`).

Where a source has no ids, a text is its own id, so identical passages share
an id for false-negative masking and identical queries one for `train_fraction`.

Cleaning (JSONL, BEIR and MS MARCO): examples whose query or positive is empty
(or only whitespace) are skipped, and empty hard negatives are dropped from the
example's list; a `DataWarning` once the source has been read says how many,
with the first few lines (or query ids). Malformed input raises `DataError`
naming the file, line and field.
"""

import functools
import os
import warnings
from typing import NamedTuple

import tensorflow as tf

from gtr_keras.beir.qrels_checks import check_qrels
from gtr_keras.beir.readers import load_corpus, load_qrels, load_queries
from gtr_keras.errors import DataError, DataWarning
from gtr_keras.utils import files
from gtr_keras.utils.text_files import iter_jsonl, iter_tsv_rows

FORMATS = ("jsonl", "beir", "msmarco", "tfrecord")
_MAX_EXAMPLES = 5
STRING_FIELDS = ("query", "positive", "query_id", "positive_id")
LIST_FIELDS = ("negatives", "negative_ids")


class Example(NamedTuple):
    """One training example: a query, its positive passage and hard negatives, with ids."""

    query: str
    positive: str
    negatives: tuple
    query_id: str
    positive_id: str
    negative_ids: tuple


def _clean(source, numbered_examples):
    """Skips examples with an empty query or positive, drops empty negatives, warns with counts."""
    skipped, dropped = [], 0
    for where, example in numbered_examples:
        if not example.query.strip() or not example.positive.strip():
            skipped.append(where)
            continue
        kept = [i for i, text in enumerate(example.negatives) if text.strip()]
        if len(kept) < len(example.negatives):
            dropped += len(example.negatives) - len(kept)
            example = example._replace(
                negatives=tuple(example.negatives[i] for i in kept),
                negative_ids=tuple(example.negative_ids[i] for i in kept),
            )
        yield example
    problems = []
    if skipped:
        problems.append(
            f"skipped {len(skipped)} example(s) with an empty query or positive "
            f"(e.g. {', '.join(skipped[:_MAX_EXAMPLES])})"
        )
    if dropped:
        problems.append(f"dropped {dropped} empty hard negative(s)")
    if problems:
        warnings.warn(f"{source}: {'; '.join(problems)}", DataWarning, stacklevel=2)


def _text(path, line_no, record, field):
    value = record.get(field)
    if value is None:
        raise DataError(f"{path}:{line_no}: missing field `{field}`")
    if not isinstance(value, str):
        raise DataError(f"{path}:{line_no}: field `{field}` must be a string, got {type(value).__name__}")
    return value


def _identifier(path, line_no, value, field):
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"{path}:{line_no}: field `{field}` must be a string or an integer, got {type(value).__name__}")
    return str(value)


def _list(path, line_no, record, field, integers_allowed):
    values = record.get(field, [])
    if not isinstance(values, list):
        raise DataError(f"{path}:{line_no}: field `{field}` must be a list, got {type(values).__name__}")
    allowed = (str, int) if integers_allowed else str
    for value in values:
        if isinstance(value, bool) or not isinstance(value, allowed):
            kinds = "strings or integers" if integers_allowed else "strings"
            raise DataError(f"{path}:{line_no}: field `{field}` must hold {kinds}, got {type(value).__name__}")
    return tuple(str(value) for value in values)


def _jsonl_triples(path):
    for line_no, record in iter_jsonl(path):
        query, positive = _text(path, line_no, record, "query"), _text(path, line_no, record, "positive")
        negatives = _list(path, line_no, record, "negatives", integers_allowed=False)
        negative_ids = negatives
        if "negative_ids" in record:
            negative_ids = _list(path, line_no, record, "negative_ids", integers_allowed=True)
            if len(negative_ids) != len(negatives):
                raise DataError(
                    f"{path}:{line_no}: field `negative_ids` has {len(negative_ids)} ids for {len(negatives)} negatives"
                )
        query_id, positive_id = (
            _identifier(path, line_no, record[field], field) if field in record else default
            for field, default in (("query_id", query), ("positive_id", positive))
        )
        yield f"line {line_no}", Example(query, positive, negatives, query_id, positive_id, negative_ids)


def read_triples(path):
    """Reads JSONL training triples (see the module docstring), cleaned.

    Args:
        path: a `.jsonl` or `.jsonl.gz` file.

    Yields:
        `Example`s; texts stand in for missing ids.

    Raises:
        DataError: malformed JSON, a missing `query` or `positive`, or a field
            of the wrong type; the message names the file, line and field.

    Example:
    >>> next(read_triples("train.jsonl")).negatives  # doctest: +SKIP
    ('A passage that looks relevant but is not.',)
    """
    path = os.fspath(path)
    return _clean(path, _jsonl_triples(path))


def _msmarco_triples(path):
    for line_no, (query, positive, negative) in iter_tsv_rows(path, ("query", "positive", "negative")):
        yield f"line {line_no}", Example(query, positive, (negative,), query, positive, (negative,))


def read_msmarco_triples(path):
    """Reads MS MARCO training triples, `query \\t positive \\t negative` a line, cleaned.

    Args:
        path: a `.tsv` or `.tsv.gz` file (e.g. `triples.train.small.tsv`).

    Yields:
        `Example`s with one negative each; texts serve as ids.

    Raises:
        DataError: a line without exactly 3 columns.

    Example:
    >>> next(read_msmarco_triples("triples.train.small.tsv")).query  # doctest: +SKIP
    """
    path = os.fspath(path)
    return _clean(path, _msmarco_triples(path))


def read_mined_negatives(path, corpus_ids):
    """Reads hard negatives mined for each query, `{"query_id", "negative_ids": [...]}` a line.

    Args:
        path: a `.jsonl` or `.jsonl.gz` file.
        corpus_ids: the collection's document ids (a set), to check against.

    Returns:
        A dict from query id to a list of document ids, in file order.

    Raises:
        DataError: a missing field, a document id not in the corpus or a query
            listed twice; the message names the file and line.

    Example:
    >>> read_mined_negatives("negatives.jsonl", {"d1", "d2"})  # doctest: +SKIP
    {'q1': ['d2']}
    """
    path = os.fspath(path)
    mined, first_line = {}, {}
    for line_no, record in iter_jsonl(path):
        if "query_id" not in record:
            raise DataError(f"{path}:{line_no}: missing field `query_id`")
        if "negative_ids" not in record:
            raise DataError(f"{path}:{line_no}: missing field `negative_ids`")
        query_id = _identifier(path, line_no, record["query_id"], "query_id")
        if query_id in first_line:
            raise DataError(f"{path}:{line_no}: query {query_id!r} already listed on line {first_line[query_id]}")
        first_line[query_id] = line_no
        negative_ids = _list(path, line_no, record, "negative_ids", integers_allowed=True)
        unknown = [doc_id for doc_id in negative_ids if doc_id not in corpus_ids]
        if unknown:
            raise DataError(
                f"{path}:{line_no}: field `negative_ids` has {len(unknown)} id(s) not in the corpus "
                f"(e.g. {', '.join(repr(d) for d in unknown[:_MAX_EXAMPLES])})"
            )
        mined[query_id] = list(negative_ids)
    return mined


@functools.lru_cache(maxsize=1)
def _beir_examples(directory, split, negatives_path):
    corpus = load_corpus(directory)
    queries = load_queries(directory)
    qrels, report = check_qrels(load_qrels(directory, split), corpus.ids, queries)
    qrels_path = os.path.join(directory, "qrels", f"{split}.tsv")
    if not report.ok:
        warnings.warn(f"{qrels_path}: {report}", DataWarning, stacklevel=3)
    documents = dict(zip(corpus.ids, corpus.joined()))
    mined = read_mined_negatives(negatives_path, documents) if negatives_path else {}

    def numbered():
        for query_id, judgements in qrels.items():
            negative_ids = tuple(d for d in mined.get(query_id, ()) if judgements.get(d, 0) <= 0)
            negatives = tuple(documents[d] for d in negative_ids)
            for doc_id, score in judgements.items():
                if score > 0:
                    yield (
                        f"query {query_id!r}",
                        Example(queries[query_id], documents[doc_id], negatives, query_id, doc_id, negative_ids),
                    )

    return tuple(_clean(qrels_path, numbered()))


def read_beir(directory, split="train", negatives_path=None):
    """Training examples from a BEIR collection's qrels, cleaned.

    One example per (query, document with a positive score). Judgements of
    unknown queries or documents are dropped with a `DataWarning`. The
    examples of the last collection read are kept in memory, so passes after
    the first do not reread the corpus.

    Args:
        directory: the BEIR directory.
        split: the qrels split (`qrels/<split>.tsv`).
        negatives_path: optional mined-negatives JSONL file.

    Returns:
        A tuple of `Example`s, with the collection's query and document ids.

    Example:
    >>> examples = read_beir("data/scifact", "train", "scifact-negatives.jsonl")  # doctest: +SKIP
    """
    return _beir_examples(os.fspath(directory), split, None if negatives_path is None else os.fspath(negatives_path))


_TFRECORD_FEATURES = {
    **{name: tf.io.FixedLenFeature([], tf.string) for name in STRING_FIELDS},
    **{name: tf.io.VarLenFeature(tf.string) for name in LIST_FIELDS},
}


def _compression(path):
    return "GZIP" if os.fspath(path).endswith(".gz") else None


def write_tfrecord(examples, path):
    """Writes `Example`s as `tf.train.Example` records, one per example.

    Features: `query`, `positive`, `query_id`, `positive_id` (bytes) and
    `negatives`, `negative_ids` (bytes lists), UTF-8 encoded. The file is
    GZIP-compressed when `path` ends with `.gz`.

    Args:
        examples: an iterable of `Example` (e.g. from `read_triples`).
        path: the output file, local or `gs://...` (any `tf.io.gfile` path).
            It appears whole or not at all: if reading `examples` raises,
            an existing file is left as it was.

    Returns:
        The number of records written.

    Example:
    >>> write_tfrecord(read_msmarco_triples("triples.tsv"), "triples.tfrecord.gz")  # doctest: +SKIP
    """

    def feature(values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode("utf-8") for v in values]))

    count = 0
    with (
        files.atomic_outputs(path) as (staged,),
        tf.io.TFRecordWriter(str(staged), options=_compression(path)) as writer,
    ):
        for example in examples:
            features = {name: feature([getattr(example, name)]) for name in STRING_FIELDS}
            features.update({name: feature(getattr(example, name)) for name in LIST_FIELDS})
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
            count += 1
    return count


def _parse_record(record):
    parsed = tf.io.parse_single_example(record, _TFRECORD_FEATURES)
    return {name: tf.sparse.to_dense(v) if name in LIST_FIELDS else v for name, v in parsed.items()}


def tfrecord_dataset(path):
    return tf.data.TFRecordDataset(os.fspath(path), compression_type=_compression(path)).map(_parse_record)


def decode_record(element):
    return Example(
        **{
            name: tuple(v.decode("utf-8") for v in element[name])
            if name in LIST_FIELDS
            else element[name].decode("utf-8")
            for name in Example._fields
        }
    )
