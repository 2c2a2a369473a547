"""Training: `losses` (bidirectional in-batch softmax, similarity distillation), `examples` (training
examples, (query, positive, hard negatives), read from JSONL, BEIR, MS MARCO and TFRecord), `data`
(`TrainingData`, the tf.data pipeline over them), `dual_encoder` (`DualEncoder`, the Keras model that `fit`
trains), `config` (`TrainConfig`, YAML, precisions, strategies), `distributed` (`TF_CONFIG`, the
multi-worker strategy, each replica's share of the global batch, the collectives that keep workers in
step), `resume` (the run record and its checks), `callbacks` (checkpoints, TensorBoard scalars,
validation, progress) and `loop` (`train`). Distillation, laid out as training is, is `gtr_keras.distillation`."""
