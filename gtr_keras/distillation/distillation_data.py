"""`DistillationTexts`: the texts a student is distilled on (pairs or single texts), as batches with the
teacher's embeddings of each."""

import contextlib
import dataclasses
import os
from typing import ClassVar

import numpy as np
import tensorflow as tf

from gtr_keras.beir.text_inputs import read_texts
from gtr_keras.errors import DataError, UserError
from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.models.gtr.gtr_tokenizer import DOCUMENT_LENGTH, QUERY_LENGTH
from gtr_keras.training.data import slice_rows
from gtr_keras.training.examples import Example, read_triples
from gtr_keras.utils import files
from gtr_keras.utils.text_files import iter_jsonl

TEXT_SUFFIXES = (".txt", ".jsonl", ".jsonl.gz")


@dataclasses.dataclass
class DistillationTexts:
    """The texts a student is distilled on, and how they become batches.

    Files (any mix), read by the project's readers:

    - `.txt`: a single text a line (`text_inputs.read_texts`; blank lines skipped).
    - `.jsonl`, `.jsonl.gz` whose first record has a `"query"`: pairs in the
      training-data format, `{"query": str, "positive": str, ...}`
      (`examples.read_triples`; negatives are not used; pairs with an empty text
      are skipped with a `DataWarning`).
    - other `.jsonl`, `.jsonl.gz`: single texts, `{"_id", "text"[, "title"]}`
      records (`text_inputs.read_texts`: a BEIR corpus, embedded as
      `"title text"`; empty texts skipped).

    A pair's query is embedded with the query budget and scored against the
    batch's documents; a single text is its own anchor (see
    `SimilarityDistillationLoss`). The texts and the teacher's embeddings of
    each distinct text (N x Dt x 4 bytes) are held in memory, in TensorFlow
    variables that the input pipeline reads from.

    Args:
        texts: the files, local or on any file system `tf.io.gfile` knows.
        query_length: the student's query budget, EOS included.
        document_length: the student's document budget, EOS included.
        shuffle_buffer: examples in the shuffle buffer.

    Example:
    >>> data = DistillationTexts(["pairs.jsonl.gz", "passages.txt"], query_length=32, document_length=128)
    >>> data.check()  # doctest: +SKIP
    25000
    """

    texts: list
    query_length: int = QUERY_LENGTH
    document_length: int = DOCUMENT_LENGTH
    shuffle_buffer: int = 100_000
    num_negatives: ClassVar[int] = 0

    def __post_init__(self):
        if isinstance(self.texts, (str, os.PathLike)):
            self.texts = [self.texts]
        if (
            not isinstance(self.texts, (list, tuple))
            or not self.texts
            or not all(isinstance(path, (str, os.PathLike)) for path in self.texts)
        ):
            raise UserError(f"texts must be a list of files, got {self.texts!r}")
        self.texts = [os.fspath(path) for path in self.texts]
        for name in ("query_length", "document_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise UserError(f"{name} must be at least 2 (one token and EOS), got {value!r}")
        self._examples = None

    @property
    def source(self):
        return ", ".join(self.texts)

    def resolved_format(self):
        return "texts"

    def files(self):
        """`{"texts.N": path}` for each file. Raises `DataError` for a missing or unsupported one."""
        for path in self.texts:
            if not path.endswith(TEXT_SUFFIXES):
                raise DataError(f"{path}: unsupported texts file; expected {', '.join(TEXT_SUFFIXES)}")
            if not files.isfile(path):
                raise DataError(f"{path}: no such file (the texts to distil on)")
        return {f"texts.{number}": path for number, path in enumerate(self.texts)}

    def read(self):
        """The examples, `[(query or None, document)]` in file order (read once, then kept)."""
        if self._examples is None:
            self.files()
            self._examples = [example for path in self.texts for example in _read_texts_file(path)]
            if not self._examples:
                raise DataError(f"{self.source}: no texts to distil on (empty, or every text is empty)")
        return self._examples

    def check(self):
        """Reads every file once so that bad data fails before the teacher runs; returns the example count."""
        return len(self.read())

    def examples(self):
        """The examples as `examples.Example`s (a single text as the positive of an empty query)."""
        return (Example(query or "", document, (), "", "", ()) for query, document in self.read())

    def surface_errors(self):
        """A context that does nothing: the texts are read and checked before the pipeline starts."""
        return contextlib.nullcontext()

    def distinct_texts(self):
        """`(queries, documents)`: the distinct query texts of the pairs and the distinct documents, in
        order of first appearance: what the teacher embeds."""
        queries = dict.fromkeys(query for query, _ in self.read() if query is not None)
        documents = dict.fromkeys(document for _, document in self.read())
        return list(queries), list(documents)

    def dataset(
        self,
        tokenizer,
        teacher_queries,
        teacher_documents,
        batch_size,
        seed=0,
        repeat=True,
        skip_batches=0,
        drop_remainder=False,
        pad_to_length=False,
        rows=None,
    ):
        """Tokenised batches with the teacher's embeddings, for `DistilledDualEncoder.fit`.

        Args:
            tokenizer: the student's `GTRTokenizer`.
            teacher_queries: float32 `[len(queries), Dt]` teacher embeddings of
                `distinct_texts()[0]` (`[0, Dt]` without pairs).
            teacher_documents: float32 `[len(documents), Dt]` of `distinct_texts()[1]`.
            batch_size, seed, repeat, skip_batches, drop_remainder,
                pad_to_length, rows: as in `TrainingData.dataset`.

        Returns:
            A `tf.data.Dataset` of dicts: `positive` (and with pairs `query`,
            empty for single texts) `{"token_ids", "padding_mask"}` int32
            `[B, L]`; `single` bool `[B]`; `teacher_positive` and
            `teacher_query` float32 `[B, Dt]` (a single text's is its own).
        """
        queries, documents = self.distinct_texts()
        query_row = {text: row for row, text in enumerate(queries)}
        document_row = {text: row for row, text in enumerate(documents)}
        examples = self.read()
        with tf.device("/cpu:0"):  # variables, not constants: a graph holds at most 2 GB
            table = {
                "positive": tf.Variable(documents, trainable=False, dtype=tf.string),
                "query": tf.Variable(queries or [""], trainable=False, dtype=tf.string),
                "teacher_positive": tf.Variable(np.asarray(teacher_documents, np.float32), trainable=False),
                "teacher_query": tf.Variable(np.asarray(teacher_queries, np.float32), trainable=False),
                "document_row": tf.Variable(
                    np.array([document_row[document] for _, document in examples], np.int64), trainable=False
                ),
                "query_row": tf.Variable(
                    np.array([-1 if query is None else query_row[query] for query, _ in examples], np.int64),
                    trainable=False,
                ),
            }
        preprocessor = GTRTextEmbedderPreprocessor(
            tokenizer, self.document_length, self.query_length, pad_to_length=pad_to_length
        )

        def features(positions):
            document_rows = tf.gather(table["document_row"], positions)
            query_rows = tf.gather(table["query_row"], positions)
            single = query_rows < 0
            texts = {"positive": tf.gather(table["positive"], document_rows)}
            teacher_positive = tf.gather(table["teacher_positive"], document_rows)
            teacher_query = teacher_positive
            if queries:
                own_rows = tf.maximum(query_rows, 0)
                texts["query"] = tf.where(single, "", tf.gather(table["query"], own_rows))
                teacher_query = tf.where(single[:, None], teacher_positive, tf.gather(table["teacher_query"], own_rows))
            return {
                **preprocessor.tower_features(texts),
                "single": single,
                "teacher_positive": teacher_positive,
                "teacher_query": teacher_query,
            }

        dataset = tf.data.Dataset.range(len(examples))
        dataset = dataset.shuffle(self.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat:
            dataset = dataset.repeat()
        dataset = slice_rows(dataset.batch(batch_size, drop_remainder=drop_remainder).skip(skip_batches), rows)
        return dataset.map(features, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _read_texts_file(path):
    """`[(query or None, document)]` of one texts file (see `DistillationTexts`)."""
    if path.endswith((".jsonl", ".jsonl.gz")):
        first = next(iter_jsonl(path), (None, {}))[1]
        if "query" in first:
            return [(example.query, example.positive) for example in read_triples(path)]
    return [(None, text) for text in read_texts(path)[1] if text.strip()]
