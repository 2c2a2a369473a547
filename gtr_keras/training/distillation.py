"""Distillation: a GTR student learns a teacher's in-batch similarities, and optionally its embeddings.

`distill(config)` is the loop behind `gtr-keras distill`: the texts (pairs or
single texts, `DistillationTexts`) are read and checked, the teacher
(`gtr_keras.training.teachers`) embeds every distinct text once into sharded,
resumable files under `output_dir/teacher_embeddings` (each shard records the
SHA-256 of its texts and the teacher's fingerprint, checked on resume), and
the student trains with `SimilarityDistillationLoss` in `train`'s own loop
(`loop.run_training`: strategies with the global batch, bf16, resume after
a kill, TensorBoard, validation, keep-best). The student is written as a
gtr-keras model directory `output_dir/model`; the projection into the
teacher's space (for the embedding MSE) is a training aid and is not kept.
"""

import contextlib
import dataclasses
import functools
import math
import os
from typing import ClassVar

import keras
import numpy as np
import tensorflow as tf

from gtr_keras.errors import DataError, UserError
from gtr_keras.models.gtr.preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.models.gtr.tokenizer import DOCUMENT_LENGTH, QUERY_LENGTH
from gtr_keras.retrieval.readers import read_texts
from gtr_keras.retrieval.shards import ShardWriter
from gtr_keras.training.config import TrainConfig
from gtr_keras.training.data import slice_rows
from gtr_keras.training.dual_encoder import DualEncoder, gather
from gtr_keras.training.examples import Example, read_triples
from gtr_keras.training.loop import run_training
from gtr_keras.training.losses import SimilarityDistillationLoss
from gtr_keras.utils import files
from gtr_keras.utils.text_files import iter_jsonl

TEXT_SUFFIXES = (".txt", ".jsonl", ".jsonl.gz")
TEACHER_EMBEDDINGS = "teacher_embeddings"


@dataclasses.dataclass
class DistillationTexts:
    """The texts a student is distilled on, and how they become batches.

    Files (any mix), read by the project's readers:

    - `.txt`: a single text a line (`readers.read_texts`; blank lines skipped).
    - `.jsonl`, `.jsonl.gz` whose first record has a `"query"`: pairs in the
      training-data format, `{"query": str, "positive": str, ...}`
      (`examples.read_triples`; negatives are not used; pairs with an empty text
      are skipped with a `DataWarning`).
    - other `.jsonl`, `.jsonl.gz`: single texts, `{"_id", "text"[, "title"]}`
      records (`readers.read_texts`: a BEIR corpus, embedded as
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
        if (not isinstance(self.texts, (list, tuple)) or not self.texts
                or not all(isinstance(path, (str, os.PathLike)) for path in self.texts)):
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

    def dataset(self, tokenizer, teacher_queries, teacher_documents, batch_size, seed=0, repeat=True,
                skip_batches=0, drop_remainder=False, pad_to_length=False, rows=None):
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
                    np.array([document_row[document] for _, document in examples], np.int64), trainable=False),
                "query_row": tf.Variable(
                    np.array([-1 if query is None else query_row[query] for query, _ in examples], np.int64),
                    trainable=False),
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
            return {**preprocessor.tower_features(texts), "single": single,
                    "teacher_positive": teacher_positive, "teacher_query": teacher_query}

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


@keras.saving.register_keras_serializable(package="gtr_keras")
class DistilledDualEncoder(DualEncoder):
    """Trains a GTR student on batches of `DistillationTexts.dataset` with `SimilarityDistillationLoss`.

    Under a distribution strategy the score matrices are those of the global
    batch, as `DualEncoder`'s loss is: each replica gathers every replica's
    student and teacher embeddings and accounts for its own rows.

    Metrics: `loss`, and `accuracy`, the share of anchors whose best-scoring
    document in the batch is the same under the student as under the teacher.

    Args:
        encoder: the student `GTRTextEmbedder`.
        teacher_dim: the teacher's embedding size `Dt`.
        temperature: the student's softmax temperature.
        teacher_temperature: the teacher's softmax temperature.
        mse_weight: weight of the embedding MSE (0: none). When the sizes
            differ, a bias-free `Dense(teacher_dim)` (`projection`) maps the
            student's embeddings into the teacher's space for it.

    Example:
    >>> student = keras_hub.models.TextEmbedder.from_preset(model_dir)
    >>> model = DistilledDualEncoder(student, teacher_dim=384, mse_weight=1.0)
    >>> tuple(model.projection.kernel.shape)
    (64, 384)
    >>> model.compile(optimizer=make_optimizer(steps=100))
    >>> batches = texts.dataset(student.preprocessor.tokenizer, teacher_queries, teacher_documents, 32)  # doctest: +SKIP
    >>> model.fit(batches, steps_per_epoch=100)  # doctest: +SKIP
    """

    def __init__(self, encoder, teacher_dim, temperature=0.05, teacher_temperature=0.05, mse_weight=0.0, **kwargs):
        super().__init__(encoder, temperature, mask_false_negatives=False, **kwargs)
        if self.grad_cache_chunk_size:
            raise ValueError("DistilledDualEncoder does not support GradCache")
        self.teacher_dim = teacher_dim
        self.teacher_temperature = teacher_temperature
        self.mse_weight = mse_weight
        self.distillation_loss = SimilarityDistillationLoss(temperature, teacher_temperature, mse_weight)
        self.projection = None
        if mse_weight and teacher_dim != encoder.embedding_dim:
            self.projection = keras.layers.Dense(teacher_dim, use_bias=False, name="teacher_projection",
                                                 dtype=encoder.dtype_policy)
            self.projection.build((None, encoder.embedding_dim))

    def _embed(self, batch, training):
        return {name: self.encoder(batch[name], training=training) for name in ("query", "positive") if name in batch}

    def _replica_loss(self, batch, embeddings):
        context = tf.distribute.get_replica_context()
        documents = embeddings["positive"]
        single = batch["single"]
        anchors = documents
        if "query" in embeddings:
            anchors = tf.where(single[:, None], documents, embeddings["query"])
        local = {"student_anchors": anchors, "student_documents": documents,
                 "teacher_anchors": batch["teacher_query"], "teacher_documents": batch["teacher_positive"],
                 "single": tf.cast(single, tf.int32)}
        if self.projection is not None:
            local.update(projected_anchors=self.projection(anchors), projected_documents=self.projection(documents))
        gathered = {name: gather(context, x) for name, x in local.items()}
        gathered["single"] = tf.cast(gathered["single"], tf.bool)
        size = tf.shape(documents)[0]
        start = context.replica_id_in_sync_group * size
        return self.distillation_loss.loss_and_hits(**gathered, rows=(start, start + size))

    def get_config(self):
        config = super().get_config()
        for name in ("mask_false_negatives", "grad_cache_chunk_size"):
            config.pop(name)
        return {**config, "teacher_dim": self.teacher_dim, "teacher_temperature": self.teacher_temperature,
                "mse_weight": self.mse_weight}


@dataclasses.dataclass
class DistillConfig(TrainConfig):
    """Settings of a `gtr-keras distill` run: `TrainConfig`'s, with these differences.

    `init` is the student (a model directory, or a preset to start from
    random weights with a SentencePiece model trained on the texts);
    `data` is a `DistillationTexts` (or a dict of its arguments);
    `temperature` is the student's softmax temperature (default 0.05);
    `grad_cache_chunk_size` must stay unset and `mask_false_negatives` does
    not apply (distillation has no positives to mask).

    Args:
        teacher: the teacher, anything `teachers.load_teacher` takes.
        teacher_temperature: the teacher's softmax temperature (0.05).
        mse_weight: weight of the embedding MSE term (0: none).
        teacher_batch_size: texts per teacher forward pass.
        teacher_shard_size: texts per shard of the teacher-embedding cache.

    Resuming compares the teacher by its fingerprint (weights, vocabulary,
    configuration), and the texts by content, like the other inputs.

    Example:
    >>> config = DistillConfig(init="gtr-small", data={"texts": ["pairs.jsonl"]}, output_dir="runs/student",
    ...                        teacher="models/all-MiniLM-L6-v2")
    >>> config.temperature
    0.05
    """

    teacher: str = None
    temperature: float = 0.05
    teacher_temperature: float = 0.05
    mse_weight: float = 0.0
    teacher_batch_size: int = 64
    teacher_shard_size: int = 4096

    data_class: ClassVar[type] = DistillationTexts
    flags: ClassVar[dict] = {"teacher": "--teacher", "init": "--student", "output_dir": "--output-dir",
                             "data.texts": "--texts"}

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.teacher, (str, os.PathLike)) or not os.fspath(self.teacher):
            raise UserError(f"teacher must name a model, got {self.teacher!r}")
        if self.grad_cache_chunk_size is not None:
            raise UserError("grad_cache_chunk_size does not apply to distillation (leave it unset)")
        for name in ("teacher_batch_size", "teacher_shard_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name} must be an integer of at least 1, got {value!r}")
        for name in ("teacher_temperature", "mse_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UserError(f"{name} must be a finite number, got {value!r}")
        if not self.teacher_temperature > 0:
            raise UserError(f"teacher_temperature must be positive, got {self.teacher_temperature}")
        if self.mse_weight < 0:
            raise UserError(f"mse_weight must not be negative, got {self.mse_weight}")


def teacher_embeddings(teacher, texts, kind, work_dir, batch_size=64, shard_size=4096, verbose=1):
    """The teacher's embeddings of `texts`, computed once into resumable shards in `work_dir`.

    A rerun reuses the finished shards when the teacher (its fingerprint),
    the texts (per shard) and the shard size are unchanged, and refuses
    (`MismatchError`, naming what changed) otherwise.

    Args:
        teacher: a `teachers.Teacher`.
        texts: the distinct texts, in a fixed order.
        kind: `"query"` or `"document"` (the budget of a GTR teacher).
        work_dir: the shard directory.
        batch_size: texts per forward pass.
        shard_size: texts per shard.
        verbose: print a line per shard.

    Returns:
        float32 `[len(texts), teacher.embedding_dim]`.
    """
    writer = ShardWriter(work_dir, [str(row) for row in range(len(texts))], texts, shard_size,
                         {"teacher_sha256": teacher.fingerprint(), "teacher_kind": kind})
    pending = writer.pending_shards()
    for done, shard in enumerate(pending, 1):
        rows = teacher.encode(texts[shard.start:shard.end], kind, batch_size, progress=False)
        if not np.isfinite(rows).all():
            raise DataError(f"{teacher.source}: the teacher gave non-finite embeddings for {kind} texts "
                            f"{shard.start}-{shard.end - 1}")
        writer.write(shard.number, rows)
        if verbose:
            print(f"teacher {kind} embeddings: shard {shard.number + 1} of {writer.num_shards} written "
                  f"({done} of {len(pending)} this run)", flush=True)
    return writer.assemble()


def distill(config):
    """Distils a teacher into a GTR student and writes the model directory `output_dir/model`.

    The order of work: the settings, the resumed run's record and the texts
    are checked (a bad input fails here, in seconds); the teacher is loaded
    and fingerprinted; the student is built; the teacher embeds the distinct
    texts into `output_dir/teacher_embeddings/{queries,documents}` (resumable,
    reused by a rerun); then the student trains (`loop.run_training`).

    Args:
        config: a `DistillConfig`, or a dict of its settings.

    Returns:
        The student's `Encoder`.

    Raises:
        UserError: a bad setting. DataError: texts missing, malformed or empty.
        CheckpointError: no teacher or student model there.
        MismatchError: `output_dir` holds a run of other settings or inputs
            (the teacher, the texts, the student).

    Example:
    >>> student = distill({"init": "gtr-small", "teacher": "models/all-MiniLM-L6-v2", "output_dir": "runs/s",
    ...                    "data": {"texts": ["pairs.jsonl.gz"]}, "steps": 2000})  # doctest: +SKIP
    """
    from gtr_keras.training.teachers import load_teacher

    if isinstance(config, dict):
        config = DistillConfig.from_dict(config)
    loaded = {}

    def inputs():
        loaded["teacher"] = load_teacher(config.teacher)
        return {"teacher": {"path": os.fspath(config.teacher), "sha256": loaded["teacher"].fingerprint()}}

    def make_model(encoder):
        return DistilledDualEncoder(encoder, loaded["teacher"].embedding_dim, config.temperature,
                                    config.teacher_temperature, config.mse_weight)

    def make_dataset(run, tokenizer, batch_size, **kwargs):
        teacher = loaded.pop("teacher")
        cache = os.path.join(run.output_dir, TEACHER_EMBEDDINGS)
        queries, documents = run.data.distinct_texts()
        common = dict(batch_size=run.teacher_batch_size, shard_size=run.teacher_shard_size, verbose=run.verbose)
        query_rows = np.zeros([0, teacher.embedding_dim], np.float32)
        if queries:
            query_rows = teacher_embeddings(teacher, queries, "query", os.path.join(cache, "queries"), **common)
        document_rows = teacher_embeddings(teacher, documents, "document", os.path.join(cache, "documents"),
                                           **common)
        return functools.partial(run.data.dataset, tokenizer, query_rows, document_rows, batch_size, **kwargs)

    return run_training(config, make_model, make_dataset, inputs)

