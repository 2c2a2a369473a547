"""`TrainingData`: the tf.data training pipeline over the examples of a source (`examples`),
tokenised in the graph.

Every path may be local or use a scheme `tf.io.gfile` knows (`gs://` on
Cloud TPU VMs, `ram://`): JSONL, TSV and BEIR files are streamed through
`gtr_keras.utils.files`, TFRecord files through `tf.data`.

`TrainingData.check` reads the source through once so that malformed input
raises its `DataError` before training, and inside
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
import itertools
import os
import re
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from gtr_keras.beir.readers import (
    CORPUS_FILES,
    QUERIES_FILES,
    in_collection,
    qrels_file,
)
from gtr_keras.errors import DataError, UserError
from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.models.gtr.gtr_tokenizer import DOCUMENT_LENGTH, QUERY_LENGTH
from gtr_keras.training.examples import (
    FORMATS,
    LIST_FIELDS,
    STRING_FIELDS,
    Example,
    decode_record,
    read_beir,
    read_msmarco_triples,
    read_triples,
    tfrecord_dataset,
)
from gtr_keras.utils import files

_SUFFIXES = {
    ".jsonl": "jsonl",
    ".jsonl.gz": "jsonl",
    ".tsv": "msmarco",
    ".tsv.gz": "msmarco",
    ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord",
    ".tfrecord.gz": "tfrecord",
}
_FRACTION_BUCKETS = 1_000_000
_ID_BUCKETS = 2**63 - 1
_SIGNATURE = {
    **{name: tf.TensorSpec([], tf.string) for name in STRING_FIELDS},
    **{name: tf.TensorSpec([None], tf.string) for name in LIST_FIELDS},
}


def slice_rows(batches: tf.data.Dataset, rows: tuple[int, int] | None) -> tf.data.Dataset:
    """`batches` with only the rows `[start, stop)` of each batch kept (all of them for `rows=None`)."""
    if rows is None:
        return batches
    start, stop = rows
    return batches.map(lambda batch: tf.nest.map_structure(lambda x: x[start:stop], batch))


def hash_ids(ids: Any) -> tf.Tensor:
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
    negatives_file: str | None = None
    num_negatives: int = 1
    query_length: int = QUERY_LENGTH
    document_length: int = DOCUMENT_LENGTH
    train_fraction: float = 1.0
    shuffle_buffer: int = 100_000
    max_positives_per_query: int | None = None

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

    def resolved_format(self) -> str:
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

    def files(self) -> dict[str, str]:
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

    def check(self) -> int:
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
    def surface_errors(self) -> Iterator[None]:
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

    def examples(self) -> Iterator[Example]:
        """Iterates over the cleaned source `Example`s, in file order, at most
        `max_positives_per_query` per query (no fraction, no shuffling)."""
        examples = self._source_examples()
        if self.max_positives_per_query is None:
            return examples
        counts: collections.Counter[str] = collections.Counter()

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
        return (decode_record(element) for element in tfrecord_dataset(self.source).as_numpy_iterator())

    def _source_dataset(self):
        if self.resolved_format() == "tfrecord":
            return tfrecord_dataset(self.source)
        return tf.data.Dataset.from_generator(self._example_dicts, output_signature=_SIGNATURE)

    def _example_dicts(self):
        """`examples()` as dicts, keeping a `DataError` for `surface_errors`."""
        try:
            for example in self.examples():
                yield example._asdict()
        except DataError as error:
            self._source_error = error
            raise

    def text_batches(
        self,
        batch_size: int,
        seed: int = 0,
        repeat: bool = True,
        skip_batches: int = 0,
        drop_remainder: bool = False,
        rows: tuple[int, int] | None = None,
    ) -> tf.data.Dataset:
        """Batches of raw strings, before tokenisation.

        Args:
            batch_size: examples per batch (the global batch under a
                distribution strategy).
            seed: shuffling and negative sampling seed.
            repeat: cycle through the data forever (reshuffled each pass).
            skip_batches: batches to skip at the start, to resume a run.
            drop_remainder: drop a last partial batch, so the batch size is
                static (TPUs).
            rows: `(start, stop)`: keep these rows of each batch only (an
                input pipeline's share of the global batch under a
                distribution strategy, `distributed.distributed_batches`).

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
                return {name: example[name] for name in STRING_FIELDS}
            order = tf.random.experimental.stateless_shuffle(
                tf.range(tf.size(example["negatives"])),
                seed=tf.stack([tf.constant(seed, tf.int64), position]),
            )
            picks = tf.gather(order, tf.range(k) % tf.size(order))
            return {**example, **{name: tf.gather(example[name], picks) for name in LIST_FIELDS}}

        dataset = dataset.enumerate().map(pick_negatives, num_parallel_calls=tf.data.AUTOTUNE)
        return slice_rows(dataset.batch(batch_size, drop_remainder=drop_remainder).skip(skip_batches), rows)

    def dataset(
        self,
        tokenizer: Any,
        batch_size: int,
        seed: int = 0,
        repeat: bool = True,
        skip_batches: int = 0,
        drop_remainder: bool = False,
        pad_to_length: bool = False,
        rows: tuple[int, int] | None = None,
    ) -> tf.data.Dataset:
        """Tokenised training batches for `DualEncoder.fit`.

        Args:
            tokenizer: a `GTRTokenizer` (its lengths are replaced by
                `query_length` and `document_length`).
            batch_size, seed, repeat, skip_batches, drop_remainder, rows: as
                in `text_batches` (the rows are taken before tokenisation).
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

        batches = self.text_batches(batch_size, seed, repeat, skip_batches, drop_remainder, rows)
        return batches.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
