"""Training: `losses` (bidirectional in-batch softmax, similarity distillation), `data` (training
examples from JSONL, BEIR, MS MARCO and TFRecord), `dual_encoder` (`DualEncoder`, the Keras model that
`fit` trains), `config` (`TrainConfig`, YAML, precisions, strategies), `distributed` (`TF_CONFIG`, the
multi-worker strategy, each replica's share of the global batch, the collectives that keep workers in
step), `resume` (the run record and its checks), `callbacks` (checkpoints, TensorBoard scalars,
validation, progress), `loop` (`train`), `teachers` and `distillation` (`distill`)."""
