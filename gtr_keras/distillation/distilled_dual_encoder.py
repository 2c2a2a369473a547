"""`DistilledDualEncoder`: the Keras model that `fit` trains to match a teacher's in-batch similarities."""

import keras
import tensorflow as tf

from gtr_keras.training.dual_encoder import DualEncoder, gather
from gtr_keras.training.losses import SimilarityDistillationLoss


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
    >>> tokenizer = student.preprocessor.tokenizer
    >>> batches = texts.dataset(tokenizer, teacher_queries, teacher_documents, 32)  # doctest: +SKIP
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
            self.projection = keras.layers.Dense(
                teacher_dim, use_bias=False, name="teacher_projection", dtype=encoder.dtype_policy
            )
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
        local = {
            "student_anchors": anchors,
            "student_documents": documents,
            "teacher_anchors": batch["teacher_query"],
            "teacher_documents": batch["teacher_positive"],
            "single": tf.cast(single, tf.int32),
        }
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
        return {
            **config,
            "teacher_dim": self.teacher_dim,
            "teacher_temperature": self.teacher_temperature,
            "mse_weight": self.mse_weight,
        }
