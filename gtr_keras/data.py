"""tf.data training pipelines: (query, positive, hard negatives) examples, tokenised in the graph.

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

Every path may be local or use a scheme `tf.io.gfile` knows (`gs://` on
Cloud TPU VMs, `ram://`): JSONL, TSV and BEIR files are streamed through
`gtr_keras.files`, TFRecord files through `tf.data`.

Where a source has no ids, a text is its own id, so identical passages share
an id for false-negative masking and identical queries one for `train_fraction`.

Cleaning (JSONL, BEIR and MS MARCO): examples whose query or positive is empty
(or only whitespace) are skipped, and empty hard negatives are dropped from the
example's list; a `DataWarning` once the source has been read says how many,
with the first few lines (or query ids). Malformed input raises
`DataError` naming the file, line and field: `TrainingData.check` reads the
source through once so that this happens before training, and inside
`TrainingData.surface_errors` an error met in the `tf.data` pipeline is raised
as that `DataError` rather than wrapped in TensorFlow's error.

Negatives: every example gets exactly `num_negatives` (k) hard negatives. From
a longer list, k are sampled without replacement; from a shorter one, the list
is shuffled and repeated until there are k. Both are deterministic functions of
the seed and the example's position in the stream, so a run is repeatable and
a resumed run sees the same batches. With k > 0, examples without any negative
are dropped; with k = 0, batches carry no negatives.

`train_fraction` F keeps the queries whose id hashes (FarmHash Fingerprint64)
into the lowest F of the hash range, so all examples of a query are kept or
dropped together, and the same queries are kept on every run and machine
(the paper's 10%-of-the-data setting).
"""

import collections
import contextlib
import dataclasses
import functools
import itertools
import os
import re
import warnings
from typing import NamedTuple

import tensorflow as tf

from gtr_keras import files
from gtr_keras.corpus import (
    CORPUS_FILES,
    QUERIES_FILES,
    DataError,
    DataWarning,
    check_qrels,
    in_collection,
    iter_jsonl,
    iter_tsv_rows,
    load_corpus,
    load_qrels,
    load_queries,
    qrels_file,
)
from gtr_keras.errors import UserError
from gtr_keras.preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.tokenizer import DOCUMENT_LENGTH, QUERY_LENGTH

FORMATS = ("jsonl", "beir", "msmarco", "tfrecord")
_SUFFIXES = {
    ".jsonl": "jsonl", ".jsonl.gz": "jsonl", ".tsv": "msmarco", ".tsv.gz": "msmarco",
    ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfrecord.gz": "tfrecord",
}
_FRACTION_BUCKETS = 1_000_000
_ID_BUCKETS = 2**63 - 1
_MAX_EXAMPLES = 5
_STRING_FIELDS = ("query", "positive", "query_id", "positive_id")
_LIST_FIELDS = ("negatives", "negative_ids")
_SIGNATURE = {
    **{name: tf.TensorSpec([], tf.string) for name in _STRING_FIELDS},
    **{name: tf.TensorSpec([None], tf.string) for name in _LIST_FIELDS},
}


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
        raise DataError(
            f"{path}:{line_no}: field `{field}` must be a string or an integer, got {type(value).__name__}"
        )
    return str(value)


def _list(path, line_no, record, field, integers_allowed):
    values = record.get(field, [])
    if not isinstance(values, list):
        raise DataError(f"{path}:{line_no}: field `{field}` must be a list, got {type(values).__name__}")
    allowed = (str, int) if integers_allowed else str
    for value in values:
        if isinstance(value, bool) or not isinstance(value, allowed):
            kinds = "strings or integers" if integers_allowed else "strings"
            raise DataError(
                f"{path}:{line_no}: field `{field}` must hold {kinds}, got {type(value).__name__}"
            )
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
                    f"{path}:{line_no}: field `negative_ids` has {len(negative_ids)} ids "
                    f"for {len(negatives)} negatives"
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
            raise DataError(
                f"{path}:{line_no}: query {query_id!r} already listed on line {first_line[query_id]}"
            )
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
                    yield f"query {query_id!r}", Example(
                        queries[query_id], documents[doc_id], negatives, query_id, doc_id, negative_ids
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
    return _beir_examples(
        os.fspath(directory), split, None if negatives_path is None else os.fspath(negatives_path)
    )


_TFRECORD_FEATURES = {
    **{name: tf.io.FixedLenFeature([], tf.string) for name in _STRING_FIELDS},
    **{name: tf.io.VarLenFeature(tf.string) for name in _LIST_FIELDS},
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
    with files.atomic_outputs(path) as (staged,), tf.io.TFRecordWriter(
        str(staged), options=_compression(path)
    ) as writer:
        for example in examples:
            features = {name: feature([getattr(example, name)]) for name in _STRING_FIELDS}
            features.update({name: feature(getattr(example, name)) for name in _LIST_FIELDS})
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
            count += 1
    return count


def _parse_record(record):
    parsed = tf.io.parse_single_example(record, _TFRECORD_FEATURES)
    return {name: tf.sparse.to_dense(v) if name in _LIST_FIELDS else v for name, v in parsed.items()}


def _tfrecord_dataset(path):
    return tf.data.TFRecordDataset(os.fspath(path), compression_type=_compression(path)).map(_parse_record)


def _decode(element):
    return Example(**{
        name: tuple(v.decode("utf-8") for v in element[name])
        if name in _LIST_FIELDS else element[name].decode("utf-8")
        for name in Example._fields
    })


def hash_ids(ids):
    """Maps string ids to int64 FarmHash fingerprints, for masking on XLA devices.

    Example:
    >>> hash_ids(tf.constant(["d1", "d1", "d2"])).numpy()[0] == hash_ids(tf.constant(["d1"])).numpy()[0]
    True
    """
    return tf.strings.to_hash_bucket_fast(ids, _ID_BUCKETS)


@dataclasses.dataclass
class TrainingData:
    """Where training examples come from, and how they are turned into batches.

    Args:
        source: a JSONL, MS MARCO TSV or TFRecord file, or a BEIR directory.
        format: one of `FORMATS`, or `"auto"` to choose from `source`.
        split: qrels split of a BEIR source.
        negatives_file: mined-negatives JSONL file of a BEIR source.
        num_negatives: hard negatives per example (k, >= 0).
        query_length: query token budget, EOS included (64 in GTR).
        document_length: passage token budget, EOS included (512 in GTR).
        train_fraction: fraction F of the queries to train on, chosen by a
            hash of the query id (1.0: all).
        shuffle_buffer: examples in the shuffle buffer.
        max_positives_per_query: keep only the first N examples of each
            query id, in source order (`None`: all). Collections whose
            broad queries judge hundreds of documents (NFCorpus: 66% of the
            training pairs come from 1,141 topic-tag queries like "plant-based
            diets") otherwise give those queries most of the batches.

    Example:
    >>> data = TrainingData("train.jsonl", num_negatives=1, query_length=32, document_length=128)
    >>> batches = data.dataset(GTRTokenizer("spiece.model"), batch_size=8, seed=0)  # doctest: +SKIP
    >>> sorted(next(iter(batches)))  # doctest: +SKIP
    ['negative_ids', 'negatives', 'positive', 'positive_id', 'query', 'query_id']
    """

    source: str
    format: str = "auto"
    split: str = "train"
    negatives_file: str = None
    num_negatives: int = 1
    query_length: int = QUERY_LENGTH
    document_length: int = DOCUMENT_LENGTH
    train_fraction: float = 1.0
    shuffle_buffer: int = 100_000
    max_positives_per_query: int = None

    def __post_init__(self):
        if self.format != "auto" and self.format not in FORMATS:
            raise UserError(f"format must be 'auto' or one of {FORMATS}, got {self.format!r}")
        if self.num_negatives < 0:
            raise UserError(f"num_negatives must be >= 0, got {self.num_negatives}")
        if not 0.0 < self.train_fraction <= 1.0:
            raise UserError(f"train_fraction must be in (0, 1], got {self.train_fraction}")
        if self.max_positives_per_query is not None and self.max_positives_per_query < 1:
            raise UserError(f"max_positives_per_query must be >= 1, got {self.max_positives_per_query}")
        for name in ("query_length", "document_length"):
            if getattr(self, name) < 2:
                raise UserError(f"{name} must be at least 2 (one token and EOS), got {getattr(self, name)}")
        self._source_error = None

    def resolved_format(self):
        """The source's format: `format`, or the one its path implies."""
        if self.format != "auto":
            return self.format
        source = os.fspath(self.source)
        if files.isdir(source):
            return "beir"
        if not files.exists(source):
            raise DataError(f"{source}: no such file or directory")
        for suffix, name in _SUFFIXES.items():
            if source.endswith(suffix):
                return name
        raise DataError(
            f"{source}: cannot tell the training data format from the name; expected a BEIR directory or a "
            f"file ending in {', '.join(_SUFFIXES)} (or set the format explicitly)"
        )

    def files(self):
        """The files the examples are read from, by role.

        Returns:
            `{"source": path}`, or for a BEIR directory `{"corpus", "queries",
            "qrels"}` paths and `"negatives"` with a `negatives_file`.

        Raises:
            DataError: the source, or a file it needs, does not exist.

        Example:
        >>> TrainingData("data/scifact", negatives_file="negatives.jsonl").files()  # doctest: +SKIP
        {'corpus': 'data/scifact/corpus.jsonl', 'queries': 'data/scifact/queries.jsonl',
         'qrels': 'data/scifact/qrels/train.tsv', 'negatives': 'negatives.jsonl'}
        """
        source = os.fspath(self.source)
        if self.resolved_format() != "beir":
            if not files.isfile(source):
                raise DataError(f"{source}: not a file (a {self.resolved_format()} source is one file)")
            return {"source": source}
        if not files.isdir(source):
            raise DataError(f"{source}: not a directory (a BEIR source is a collection directory)")
        paths = {
            "corpus": in_collection(source, CORPUS_FILES),
            "queries": in_collection(source, QUERIES_FILES),
            "qrels": qrels_file(source, self.split),
        }
        if self.negatives_file is not None:
            negatives = os.fspath(self.negatives_file)
            if not files.isfile(negatives):
                raise DataError(f"{negatives}: no such file (the negatives_file of {source})")
            paths["negatives"] = negatives
        return paths

    def check(self):
        """Reads every example once, so that bad data fails before training does.

        TFRecord sources (written by `write_tfrecord` from checked examples)
        are only checked for a first record: parsing them in full would take
        as long as an epoch.

        Returns:
            The number of examples (1 for a TFRecord source that has any).

        Raises:
            DataError: a missing file, a malformed record (naming the file,
                line and field), or no example at all.

        Example:
        >>> TrainingData("train.jsonl").check()  # doctest: +SKIP
        48
        """
        self.files()
        examples = self.examples()
        if self.resolved_format() == "tfrecord":
            examples = itertools.islice(examples, 1)
        try:
            count = sum(1 for _ in examples)
        except tf.errors.OpError as error:
            reason = re.sub(r"\{\{.*?\}\}|\[Op:.*", "", error.message).strip()
            raise DataError(f"{self.source}: unreadable TFRecord file ({reason})") from None
        if not count:
            raise DataError(
                f"{self.source}: no training examples (empty, or every example has an empty query or positive)"
            )
        return count

    @contextlib.contextmanager
    def surface_errors(self):
        """Raises a `DataError` met while a pipeline of this data ran in the block as itself.

        `tf.data` runs Python sources (JSONL, BEIR, MS MARCO) in a generator
        and reports its exceptions as a `tf.errors.InvalidArgumentError`
        carrying a traceback; inside this block, such an error is replaced
        by the one-line `DataError` behind it.

        Example:
        >>> with data.surface_errors():
        ...     model.fit(data.dataset(tokenizer, batch_size=32))  # doctest: +SKIP
        """
        self._source_error = None
        try:
            yield
        except tf.errors.OpError:
            if self._source_error is None:
                raise
            raise self._source_error from None

    def examples(self):
        """Iterates over the cleaned source `Example`s, in file order, at most
        `max_positives_per_query` per query (no fraction, no shuffling)."""
        examples = self._source_examples()
        if self.max_positives_per_query is None:
            return examples
        counts = collections.Counter()

        def kept(example):
            counts[example.query_id] += 1
            return counts[example.query_id] <= self.max_positives_per_query

        return filter(kept, examples)

    def _source_examples(self):
        data_format = self.resolved_format()
        if data_format == "jsonl":
            return read_triples(self.source)
        if data_format == "msmarco":
            return read_msmarco_triples(self.source)
        if data_format == "beir":
            return iter(read_beir(self.source, self.split, self.negatives_file))
        return (_decode(element) for element in _tfrecord_dataset(self.source).as_numpy_iterator())

    def _source_dataset(self):
        if self.resolved_format() == "tfrecord":
            return _tfrecord_dataset(self.source)
        return tf.data.Dataset.from_generator(self._example_dicts, output_signature=_SIGNATURE)

    def _example_dicts(self):
        """`examples()` as dicts, keeping a `DataError` for `surface_errors`."""
        try:
            for example in self.examples():
                yield example._asdict()
        except DataError as error:
            self._source_error = error
            raise

    def text_batches(self, batch_size, seed=0, repeat=True, skip_batches=0, drop_remainder=False):
        """Batches of raw strings, before tokenisation.

        Args:
            batch_size: examples per batch (the global batch under a
                distribution strategy).
            seed: shuffling and negative sampling seed.
            repeat: cycle through the data forever (reshuffled each pass).
            skip_batches: batches to skip at the start, to resume a run.
            drop_remainder: drop a last partial batch, so the batch size is
                static (TPUs).

        Returns:
            A `tf.data.Dataset` of dicts: `query`, `positive`, `query_id`,
            `positive_id` `[B]` strings and, when `num_negatives` > 0,
            `negatives`, `negative_ids` `[B, k]` strings.
        """
        k = self.num_negatives
        dataset = self._source_dataset()
        if self.train_fraction < 1.0:
            threshold = round(self.train_fraction * _FRACTION_BUCKETS)
            dataset = dataset.filter(
                lambda e: tf.strings.to_hash_bucket_fast(e["query_id"], _FRACTION_BUCKETS) < threshold
            )
        if k:
            dataset = dataset.filter(lambda e: tf.size(e["negatives"]) > 0)
        dataset = dataset.shuffle(self.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat:
            dataset = dataset.repeat()

        def pick_negatives(position, example):
            if not k:
                return {name: example[name] for name in _STRING_FIELDS}
            order = tf.random.experimental.stateless_shuffle(
                tf.range(tf.size(example["negatives"])),
                seed=tf.stack([tf.constant(seed, tf.int64), position]),
            )
            picks = tf.gather(order, tf.range(k) % tf.size(order))
            return {**example, **{name: tf.gather(example[name], picks) for name in _LIST_FIELDS}}

        dataset = dataset.enumerate().map(pick_negatives, num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.batch(batch_size, drop_remainder=drop_remainder).skip(skip_batches)

    def dataset(self, tokenizer, batch_size, seed=0, repeat=True, skip_batches=0, drop_remainder=False,
                pad_to_length=False):
        """Tokenised training batches for `DualEncoder.fit`.

        Args:
            tokenizer: a `GTRTokenizer` (its lengths are replaced by
                `query_length` and `document_length`).
            batch_size, seed, repeat, skip_batches, drop_remainder: as in
                `text_batches`.
            pad_to_length: pad to `query_length` / `document_length` instead
                of the batch's longest text, for static shapes (TPUs).

        Returns:
            A `tf.data.Dataset` of dicts: `query` and `positive`, each
            `{"token_ids", "padding_mask"}` int32 `[B, L]`; `positive_id` and
            `query_id` int64 `[B]` (hashed ids); and when `num_negatives` > 0,
            `negatives` `{"token_ids", "padding_mask"}` int32 `[B, k, L]` and
            `negative_ids` int64 `[B, k]`.
        """
        preprocessor = GTRTextEmbedderPreprocessor(
            tokenizer, self.document_length, self.query_length, pad_to_length=pad_to_length
        )

        def tokenize(batch):
            features = {
                **preprocessor.tower_features(batch),
                "positive_id": hash_ids(batch["positive_id"]),
                "query_id": hash_ids(batch["query_id"]),
            }
            if self.num_negatives:
                features["negative_ids"] = hash_ids(batch["negative_ids"])
            return features

        batches = self.text_batches(batch_size, seed, repeat, skip_batches, drop_remainder)
        return batches.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
