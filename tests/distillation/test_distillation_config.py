"""`DistillConfig`: the settings of a distillation run, refused one line each."""

import pytest

from gtr_keras.distillation.distillation_config import DistillConfig
from gtr_keras.errors import UserError


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"teacher": None}, r"missing setting `teacher` \(--teacher\)"),
        ({"init": None}, r"missing setting `init` \(--student\)"),
        ({"grad_cache_chunk_size": 2}, "grad_cache_chunk_size does not apply to distillation"),
        ({"mse_weight": -1.0}, "mse_weight must not be negative"),
        ({"mse_weight": float("inf")}, "mse_weight must be a finite number"),
        (
            {"sentencepiece_case_folding": True, "tokenizer": "spiece.model"},
            "sentencepiece_case_folding applies only to the SentencePiece model trained for a preset",
        ),
        (
            {"sentencepiece_vocabulary_size": 500, "init": "models/student"},
            "sentencepiece_vocabulary_size applies only .* this run uses the tokenizer of models/student",
        ),
        ({"teacher_temperature": 0}, "teacher_temperature must be positive"),
        ({"teacher_piece_size": 0}, "teacher_piece_size must be an integer of at least 1"),
        ({"data": {"texts": []}}, r"data\.texts must be a list of files"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    values = {"init": "gtr-tiny", "teacher": "t", "output_dir": "o", "data": {"texts": ["a.txt"]}, **settings}
    with pytest.raises(UserError, match=message):
        DistillConfig.from_dict(values)
