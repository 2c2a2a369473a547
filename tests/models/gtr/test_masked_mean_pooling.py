import numpy as np
import tensorflow as tf

from gtr_keras.models.gtr.masked_mean_pooling import MaskedMeanPooling


def test_mean_pooling_ignores_padding():
    x = tf.constant([[[1.0, 2.0], [3.0, 4.0], [50.0, 60.0]]])
    np.testing.assert_allclose(MaskedMeanPooling()(x, tf.constant([[1, 1, 0]])).numpy(), [[2.0, 3.0]])


def test_a_mask_of_spans_gives_one_mean_a_span_from_the_same_tokens():
    x = tf.constant([[[1.0, 2.0], [3.0, 4.0], [50.0, 60.0]]])
    spans = tf.constant([[[1, 1, 0], [0, 1, 1], [0, 0, 0]]])
    np.testing.assert_allclose(
        MaskedMeanPooling()(x, spans).numpy(), [[[2.0, 3.0], [26.5, 32.0], [0.0, 0.0]]], rtol=1e-6
    )
