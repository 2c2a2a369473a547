"""Distillation of a student from a teacher, laid out as `gtr_keras.training` is: `teachers` (the teacher
models), `distillation_data` (`DistillationTexts`), `distilled_dual_encoder` (`DistilledDualEncoder`),
`distillation_config` (`DistillConfig`) and `distillation_loop` (`distill`)."""
