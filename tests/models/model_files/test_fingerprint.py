import hashlib

import keras
import numpy as np
from conftest import TINY_ST

from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.gtr.presets import preset_config
from gtr_keras.models.model_files.fingerprint import fingerprint, update_with_weights

with open(f"{TINY_ST}/spiece.model", "rb") as _file:
    VOCABULARY = _file.read()


def _embedder(weights_of=None, document_length=32, query_length=16, lowercase=False, **architecture):
    """A one-block gtr-tiny embedder with the fixture's vocabulary, holding `weights_of`'s weights if given."""
    backbone_config = preset_config("gtr-tiny", num_layers=1, **architecture)
    embedding_dim = backbone_config.pop("embedding_dim")
    embedder = GTRTextEmbedder.from_parts(
        backbone_config, VOCABULARY, document_length, query_length, embedding_dim, lowercase=lowercase
    )
    if weights_of is not None:
        embedder.set_weights(weights_of.get_weights())
    return embedder


def test_a_fingerprint_is_a_sha256_hex_digest_the_same_for_an_embedder_and_its_encoder():
    embedder = _embedder()
    digest = fingerprint(embedder)
    assert len(digest) == 64 and set(digest) <= set("0123456789abcdef")
    assert fingerprint(embedder.batch_encoder()) == digest


def test_equal_weights_vocabulary_and_architecture_give_equal_fingerprints_whatever_the_token_budgets():
    embedder = _embedder()
    assert fingerprint(_embedder(embedder)) == fingerprint(embedder)
    assert fingerprint(_embedder(embedder, document_length=512, query_length=64)) == fingerprint(embedder)


def test_one_changed_weight_changes_the_fingerprint():
    embedder = _embedder()
    changed = _embedder(embedder)
    kernel = changed.get_layer("projection").kernel
    kernel.assign(kernel.numpy() + np.eye(*kernel.shape, dtype="float32") * 1e-3)
    assert fingerprint(changed) != fingerprint(embedder)


def test_lowercasing_changes_the_fingerprint():
    embedder = _embedder()
    assert fingerprint(_embedder(embedder, lowercase=True)) != fingerprint(embedder)


def test_an_architecture_setting_that_keeps_the_weights_shapes_changes_the_fingerprint():
    embedder = _embedder()
    assert fingerprint(_embedder(embedder, max_distance=64)) != fingerprint(embedder)


def _digest(weights):
    digest = hashlib.sha256()
    update_with_weights(digest, weights)
    return digest.hexdigest()


def test_update_with_weights_covers_the_order_shape_dtype_and_values_of_the_weights():
    a, b = keras.Variable(np.zeros((2, 3), "float32")), keras.Variable(np.ones((2, 3), "float32"))
    assert _digest([a, b]) == _digest([keras.Variable(np.zeros((2, 3), "float32")), b])
    assert _digest([a, b]) != _digest([b, a])
    assert _digest([a]) != _digest([keras.Variable(np.zeros((3, 2), "float32"))])
    assert _digest([a]) != _digest([keras.Variable(np.zeros((2, 3), "int32"))])
    assert _digest([a]) != _digest([keras.Variable(np.full((2, 3), 1e-7, "float32"))])


def test_in_bfloat16_the_model_in_float32_and_in_bfloat16_have_one_fingerprint(tiny_model_dir):
    from gtr_keras.saving import load_model

    float32, bfloat16 = load_model(tiny_model_dir), load_model(tiny_model_dir, dtype="bfloat16")
    assert fingerprint(float32) != fingerprint(bfloat16)
    assert fingerprint(float32, in_bfloat16=True) == fingerprint(bfloat16, in_bfloat16=True) != fingerprint(float32)
    changed = load_model(tiny_model_dir)
    weight = changed.model.weights[-1]
    weight.assign(weight.numpy() * 1.01)
    assert fingerprint(changed, in_bfloat16=True) != fingerprint(float32, in_bfloat16=True)
