"""keras-hub presets, `.keras` files and cloning: GTR saved and loaded the Keras way."""

import json
import os
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_ST

from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.saving import load_model

TEXTS = ["wing lift", "boundary layer " * 300, "", "Ünïcode ﬁ ①"]


def _run_fresh(code, tmp_path):
    """Runs `code` in a new Python process (nothing imported but what it imports); returns its stdout."""
    script = tmp_path / "fresh.py"
    script.write_text(code)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.large
def test_model_directory_is_a_keras_hub_preset(tiny_model_dir, tiny_encoder, tmp_path):
    assert {
        "config.json",
        "model.weights.h5",
        "task.json",
        "task.weights.h5",
        "preprocessor.json",
        "tokenizer.json",
    } <= set(os.listdir(tiny_model_dir))
    assert os.path.isfile(os.path.join(tiny_model_dir, "assets", "tokenizer", "vocabulary.spm"))
    np.save(tmp_path / "expected.npy", tiny_encoder.encode_documents(TEXTS))
    out = _run_fresh(
        f"""
import json, numpy as np
import keras_hub
import gtr_keras  # after Keras: registers GTR's classes at once
embedder = keras_hub.models.TextEmbedder.from_preset({tiny_model_dir!r})
backbone = keras_hub.models.Backbone.from_preset({tiny_model_dir!r})
preprocessor = keras_hub.models.TextEmbedderPreprocessor.from_preset({tiny_model_dir!r})
np.testing.assert_array_equal(embedder.encode_documents({TEXTS!r}), np.load({str(tmp_path / "expected.npy")!r}))
print(json.dumps([type(embedder).__name__, type(backbone).__name__, type(preprocessor).__name__,
                  embedder.query_length, embedder.document_length]))
""",
        tmp_path,
    )
    assert json.loads(out.splitlines()[-1]) == [
        "GTRTextEmbedder",
        "GTRBackbone",
        "GTRTextEmbedderPreprocessor",
        64,
        512,
    ]


@pytest.mark.large
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [None, "mixed_bfloat16"])
def test_keras_file_round_trip_in_a_fresh_process_with_safe_mode(tiny_model_dir, tmp_path, dtype):
    embedder = GTRTextEmbedder.from_preset(tiny_model_dir, dtype=dtype)
    embedder.save(tmp_path / "embedder.keras")
    texts = tf.constant(TEXTS)
    np.save(tmp_path / "embedder.npy", embedder.predict(texts, verbose=0))

    # A user model on raw strings: preprocessor, GTR, and a trainable Dense head.
    strings = keras.Input(shape=(), dtype="string")
    scores = keras.layers.Dense(2, name="head")(embedder(embedder.preprocessor(strings)))
    user = keras.Model(strings, scores)
    user.compile(optimizer="adam", loss="mse")
    head_before = user.get_layer("head").get_weights()[0].copy()
    user.fit(tf.data.Dataset.from_tensor_slices((texts, np.ones((4, 2), "float32"))).batch(2), verbose=0)
    assert not np.allclose(user.get_layer("head").get_weights()[0], head_before)
    user.save(tmp_path / "user.keras")
    np.save(tmp_path / "user.npy", user.predict(texts, verbose=0))

    out = _run_fresh(
        f"""
import json, keras, numpy as np, tensorflow as tf
import gtr_keras
texts = tf.constant({TEXTS!r})
embedder = keras.saving.load_model({str(tmp_path / "embedder.keras")!r}, safe_mode=True)
user = keras.saving.load_model({str(tmp_path / "user.keras")!r}, safe_mode=True)
np.testing.assert_array_equal(embedder.predict(texts, verbose=0), np.load({str(tmp_path / "embedder.npy")!r}))
np.testing.assert_array_equal(user.predict(texts, verbose=0), np.load({str(tmp_path / "user.npy")!r}))
print(json.dumps([type(embedder).__name__, embedder.dtype_policy.name, embedder.backbone.dtype_policy.name,
                  embedder.backbone.get_layer("block_0").compute_dtype]))
""",
        tmp_path,
    )
    expected_policy = dtype or "float32"
    assert json.loads(out.splitlines()[-1]) == [
        "GTRTextEmbedder",
        expected_policy,
        expected_policy,
        "bfloat16" if dtype else "float32",
    ]


def test_get_config_from_config_and_clone_model_keep_the_classes(tiny_encoder):
    embedder = tiny_encoder.model
    for copy in (GTRTextEmbedder.from_config(embedder.get_config()), keras.models.clone_model(embedder)):
        assert type(copy) is GTRTextEmbedder and type(copy.backbone) is GTRBackbone
        assert type(copy.preprocessor) is type(embedder.preprocessor)
        assert copy.backbone.get_config() == embedder.backbone.get_config()
        copy.set_weights(embedder.get_weights())
        features = embedder.preprocessor.features(tf.constant(TEXTS))
        np.testing.assert_allclose(copy(features), embedder(features), atol=1e-6)
    backbone = embedder.backbone
    assert type(keras.models.clone_model(backbone)) is GTRBackbone
    assert type(GTRBackbone.from_config(backbone.get_config())) is GTRBackbone


def test_bundled_demo_model_is_a_preset():
    from gtr_keras.cli.helpers.demo_steps import DEMO_MODEL

    with open(os.path.join(DEMO_MODEL, "config.json")) as f:
        assert json.load(f)["registered_name"] == "gtr_keras>GTRBackbone"
    embedder = keras_hub.models.TextEmbedder.from_preset(DEMO_MODEL)
    assert (embedder.query_length, embedder.document_length, embedder.embedding_dim) == (64, 128, 768)


def test_hub_ids_go_through_the_converter(monkeypatch, tiny_model_dir):
    import huggingface_hub

    asked = []

    def fake_download(repo_id, **kwargs):
        asked.append(repo_id)
        return TINY_ST

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    expected = load_model(tiny_model_dir).encode_documents(TEXTS)
    embedder = GTRTextEmbedder.from_preset("hf://sentence-transformers/gtr-t5-base")
    np.testing.assert_array_equal(embedder.encode_documents(TEXTS), expected)
    np.testing.assert_array_equal(load_model("gtr_t5_large_en").encode_documents(TEXTS), expected)
    np.testing.assert_array_equal(GTRTextEmbedder.from_preset(TINY_ST).encode_documents(TEXTS), expected)
    assert asked == ["sentence-transformers/gtr-t5-base", "sentence-transformers/gtr-t5-large"]


def test_hub_id_offline_fails_with_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(CheckpointError, match="could not download 'sentence-transformers/gtr-t5-base'"):
        GTRTextEmbedder.from_preset("hf://sentence-transformers/gtr-t5-base")
