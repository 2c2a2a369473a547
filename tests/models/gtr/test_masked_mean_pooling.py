import numpy as np
import tensorflow as tf

from gtr_keras.models.gtr.masked_mean_pooling import MaskedMeanPooling


def test_mean_pooling_ignores_padding():
    x = tf.constant([[[1.0, 2.0], [3.0, 4.0], [50.0, 60.0]]])
    np.testing.assert_allclose(MaskedMeanPooling()(x, tf.constant([[1, 1, 0]])).numpy(), [[2.0, 3.0]])
