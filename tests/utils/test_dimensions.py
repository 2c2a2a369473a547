import numpy as np
import pytest

from gtr_keras.errors import UserError
from gtr_keras.utils.dimensions import check_dimensions, dimensions_rule, truncate, truncate_tensor


@pytest.mark.parametrize("value", [0, 769, "x", 1.5, True, None, -3])
def test_check_dimensions_refuses_what_is_not_an_integer_from_1_to_d(value):
    with pytest.raises(UserError, match=r"^dimensions: must be an integer from 1 to 768, got"):
        check_dimensions(value, 768)


def test_check_dimensions_takes_1_to_d_and_numpy_integers():
    assert [check_dimensions(n, 768) for n in (1, 64, 768)] == [1, 64, 768]
    assert type(check_dimensions(np.int64(64), 768)) is int
    assert dimensions_rule(5000) is None
    assert dimensions_rule(0) == "must be an integer of at least 1, got 0"


def test_truncate_keeps_the_first_n_coordinates_renormalised():
    embeddings = np.random.default_rng(0).normal(size=(5, 16)).astype(np.float32)
    cut = truncate(embeddings, 4)
    expected = embeddings[:, :4] / np.linalg.norm(embeddings[:, :4], axis=1, keepdims=True)
    assert cut.dtype == np.float32 and cut.shape == (5, 4)
    np.testing.assert_allclose(cut, expected, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-6)
    assert truncate(embeddings, None) is not None and truncate(embeddings, None).shape == (5, 16)
    assert np.array_equal(truncate(np.zeros((1, 3)), 2), np.zeros((1, 2)))
    with pytest.raises(UserError, match="from 1 to 16"):
        truncate(embeddings, 17)


def test_truncate_tensor_is_truncate_in_the_graph():
    import tensorflow as tf

    embeddings = np.random.default_rng(1).normal(size=(3, 8)).astype(np.float32)
    graph = tf.function(lambda x: truncate_tensor(x, 3), input_signature=[tf.TensorSpec([None, 8], tf.float32)])
    assert graph.get_concrete_function().structured_outputs.shape.as_list() == [None, 3]
    np.testing.assert_allclose(graph(embeddings).numpy(), truncate(embeddings, 3), atol=1e-6)
