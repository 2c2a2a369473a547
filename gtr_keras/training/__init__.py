"""Training: `losses` (bidirectional in-batch softmax, similarity distillation), `data` (training
examples from JSONL, BEIR, MS MARCO and TFRecord), `dual_encoder` (`DualEncoder`, the Keras model that
`fit` trains), `config` (`TrainConfig`, YAML, precisions, strategies), `resume` (the run record and
its checks), `callbacks` (checkpoints, TensorBoard scalars, validation, progress), `loop` (`train`),
`teachers` and `distillation` (`distill`)."""
