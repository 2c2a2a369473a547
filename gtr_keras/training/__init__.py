"""Training: `losses` (bidirectional in-batch softmax, similarity distillation), `examples` (training
examples, (query, positive, hard negatives), read from JSONL, BEIR, MS MARCO and TFRecord), `data`
(`TrainingData`, the tf.data pipeline over them), `dual_encoder` (`DualEncoder`, the Keras model that `fit`
trains), `config` (`TrainConfig`, YAML, precisions, strategies), `distributed` (`TF_CONFIG`, the
multi-worker strategy, each replica's share of the global batch, the collectives that keep workers in
step), `resume` (the run record and its checks), `callbacks` (checkpoints, TensorBoard scalars,
validation, progress) and `loop` (`train`). Distillation, laid out as training is, is `gtr_keras.distillation`.

Public names: `TrainingData` and `make_optimizer` (a training loop of one's own); `train`, `TrainConfig` and
`DualEncoder` are `gtr_keras`'.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "TrainingData": "gtr_keras.training.data",
        "make_optimizer": "gtr_keras.training.dual_encoder",
    },
)
