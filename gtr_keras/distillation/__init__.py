"""Distillation of a student from a teacher, laid out as `gtr_keras.training` is: `teachers` (the teacher
models), `distillation_data` (`DistillationTexts`), `distilled_dual_encoder` (`DistilledDualEncoder`),
`distillation_config` (`DistillConfig`) and `distillation_loop` (`distill`).

Public names: `DistillConfig`, `load_teacher`; `distill` is `gtr_keras`'.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "DistillConfig": "gtr_keras.distillation.distillation_config",
        "load_teacher": "gtr_keras.distillation.teachers",
    },
)
