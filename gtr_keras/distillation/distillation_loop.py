"""`distill`: a GTR student learns a teacher's in-batch similarities, and optionally its embeddings.

`distill(config)` (a `distillation_config.DistillConfig`) is the loop behind
`gtr-keras distill`: the texts (pairs or single texts,
`distillation_data.DistillationTexts`) are read and checked, the teacher
(`gtr_keras.distillation.teachers`) embeds every distinct text once into resumable
pieces (`ResumableEncoding`) under `output_dir/teacher_embeddings` (each piece records the
SHA-256 of its texts and the teacher's fingerprint, checked on resume), and
the student (`distilled_dual_encoder.DistilledDualEncoder`) trains with
`SimilarityDistillationLoss` in `train`'s own loop
(`loop.run_training`: strategies with the global batch, bf16, resume after
a kill, TensorBoard, validation, keep-best). The student is written as a
gtr-keras model directory `output_dir/model`; the projection into the
teacher's space (for the embedding MSE) is a training aid and is not kept.
"""

import functools
import logging
import os

import numpy as np

from gtr_keras.distillation.distillation_config import DistillConfig
from gtr_keras.distillation.distilled_dual_encoder import DistilledDualEncoder
from gtr_keras.errors import DataError
from gtr_keras.models.gtr.encoder import Encoder
from gtr_keras.storage.resumable_encoding import ResumableEncoding
from gtr_keras.training.loop import run_training

logger = logging.getLogger(__name__)

TEACHER_EMBEDDINGS = "teacher_embeddings"


def teacher_embeddings(teacher, texts, kind, work_dir, batch_size=64, piece_size=4096, verbose=1):
    """The teacher's embeddings of `texts`, computed once into resumable pieces in `work_dir`.

    A rerun reuses the finished pieces when the teacher (its fingerprint),
    the texts (per piece) and the piece size are unchanged, and refuses
    (`MismatchError`, naming what changed) otherwise.

    Args:
        teacher: a `teachers.Teacher`.
        texts: the distinct texts, in a fixed order.
        kind: `"query"` or `"document"` (the budget of a GTR teacher).
        work_dir: the directory of the pieces.
        batch_size: texts per forward pass.
        piece_size: texts per piece.
        verbose: log a line per piece (INFO).

    Returns:
        float32 `[len(texts), teacher.embedding_dim]`.
    """
    writer = ResumableEncoding(
        work_dir,
        [str(row) for row in range(len(texts))],
        texts,
        piece_size,
        {"teacher_sha256": teacher.fingerprint(), "teacher_kind": kind},
    )
    pending = writer.pending_pieces()
    for done, piece in enumerate(pending, 1):
        rows = teacher.encode(texts[piece.start : piece.end], kind, batch_size, progress=False)
        if not np.isfinite(rows).all():
            raise DataError(
                f"{teacher.source}: the teacher gave non-finite embeddings for {kind} texts "
                f"{piece.start}-{piece.end - 1}"
            )
        writer.write(piece.number, rows)
        if verbose:
            logger.info(
                "teacher %s embeddings: piece %d of %d written (%d of %d this run)",
                kind,
                piece.number + 1,
                writer.num_pieces,
                done,
                len(pending),
            )
    return writer.assemble()


def distill(config: DistillConfig) -> Encoder:
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
    from gtr_keras.distillation.teachers import load_teacher

    if isinstance(config, dict):
        config = DistillConfig.from_dict(config)
    loaded = {}

    def inputs():
        loaded["teacher"] = load_teacher(config.teacher)
        return {"teacher": {"path": os.fspath(config.teacher), "sha256": loaded["teacher"].fingerprint()}}

    def make_model(encoder):
        return DistilledDualEncoder(
            encoder, loaded["teacher"].embedding_dim, config.temperature, config.teacher_temperature, config.mse_weight
        )

    def make_dataset(run, tokenizer, batch_size, **kwargs):
        teacher = loaded.pop("teacher")
        cache = os.path.join(run.output_dir, TEACHER_EMBEDDINGS)
        queries, documents = run.data.distinct_texts()
        common = dict(batch_size=run.teacher_batch_size, piece_size=run.teacher_piece_size, verbose=run.verbose)
        query_rows = np.zeros([0, teacher.embedding_dim], np.float32)
        if queries:
            query_rows = teacher_embeddings(teacher, queries, "query", os.path.join(cache, "queries"), **common)
        document_rows = teacher_embeddings(teacher, documents, "document", os.path.join(cache, "documents"), **common)
        return functools.partial(run.data.dataset, tokenizer, query_rows, document_rows, batch_size, **kwargs)

    return run_training(config, make_model, make_dataset, inputs, command="distill")
