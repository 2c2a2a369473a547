"""`DistillConfig`: the settings of a `gtr-keras distill` run, `TrainConfig`'s with a teacher."""

import dataclasses
import math
import os
from typing import ClassVar

from gtr_keras.distillation.distillation_data import DistillationTexts
from gtr_keras.errors import UserError
from gtr_keras.training.config import TrainConfig


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
        teacher_piece_size: texts per piece of the teacher-embedding cache.

    Resuming compares the teacher by its fingerprint (weights, vocabulary,
    configuration), and the texts by content, like the other inputs.

    Example:
    >>> config = DistillConfig(init="gtr-small", data={"texts": ["pairs.jsonl"]}, output_dir="runs/student",
    ...                        teacher="models/all-MiniLM-L6-v2")
    >>> config.temperature
    0.05
    """

    teacher: str | None = None
    temperature: float = 0.05
    teacher_temperature: float = 0.05
    mse_weight: float = 0.0
    teacher_batch_size: int = 64
    teacher_piece_size: int = 4096

    data_class: ClassVar[type] = DistillationTexts
    flags: ClassVar[dict] = {
        "teacher": "--teacher",
        "init": "--student",
        "output_dir": "--output-dir",
        "data.texts": "--texts",
    }

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.teacher, (str, os.PathLike)) or not os.fspath(self.teacher):
            raise UserError(f"teacher must name a model, got {self.teacher!r}")
        if self.grad_cache_chunk_size is not None:
            raise UserError("grad_cache_chunk_size does not apply to distillation (leave it unset)")
        if self.matryoshka_dims is not None:
            raise UserError("matryoshka_dims does not apply to distillation (leave it unset)")
        for name in ("teacher_batch_size", "teacher_piece_size"):
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
