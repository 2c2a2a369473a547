import numpy as np
import pytest

from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder


def _inputs():
    return {
        "token_ids": np.array([[5, 6, 7, 1, 0, 0], [9, 1, 0, 0, 0, 0]], "int32"),
        "padding_mask": np.array([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]], "int32"),
    }


def test_outputs_are_unit_norm_and_projected_to_embedding_dim():
    model = GTRTextEmbedder.from_architecture("gtr-tiny", embedding_dim=32)
    out = model(_inputs()).numpy()
    assert out.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, rtol=1e-6)
    assert model.get_layer("projection").use_bias is False
    assert isinstance(model.backbone, GTRBackbone)
    assert model.backbone(_inputs()).shape == (2, 6, 64)


def test_padding_does_not_change_embeddings():
    model = GTRTextEmbedder.from_architecture("gtr-tiny")
    inputs = _inputs()
    trimmed = {k: v[:, :4] for k, v in inputs.items()}
    np.testing.assert_allclose(model(inputs).numpy(), model(trimmed).numpy(), atol=1e-6)


def test_a_span_over_a_whole_text_embeds_it_and_padded_spans_give_zeros():
    model = GTRTextEmbedder.from_architecture("gtr-tiny", embedding_dim=32)
    spans = np.array([[[0, 4], [1, 3]], [[0, 2], [0, 0]]], "int32")
    vectors = model.embed_spans(_inputs(), spans).numpy()
    assert vectors.shape == (2, 2, 32)
    np.testing.assert_allclose(vectors[:, 0], model(_inputs()).numpy(), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors[0, 1]), 1.0, rtol=1e-6)
    assert not vectors[1, 1].any()


def test_config_round_trip_rebuilds_the_same_architecture():
    model = GTRTextEmbedder.from_architecture("gtr-tiny", feedforward="gated-gelu", dropout=0.1)
    clone = GTRTextEmbedder.from_config(model.get_config())
    assert type(clone) is GTRTextEmbedder and type(clone.backbone) is GTRBackbone
    assert clone.backbone.get_config() == model.backbone.get_config()
    assert clone.embedding_dim == model.embedding_dim
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(clone(_inputs()).numpy(), model(_inputs()).numpy(), atol=1e-6)


def test_dropout_only_in_training():
    model = GTRTextEmbedder.from_architecture("gtr-tiny", dropout=0.5)
    a, b = model(_inputs(), training=False), model(_inputs(), training=False)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(model(_inputs(), training=True), a)


def test_bfloat16_policy_keeps_float32_unit_norm_output():
    model = GTRTextEmbedder.from_architecture("gtr-tiny", dtype="mixed_bfloat16")
    out = model(_inputs())
    assert out.dtype == "float32"
    assert model.backbone.get_layer("block_0").compute_dtype == "bfloat16"
    assert model.get_layer("projection").compute_dtype == "bfloat16"
    np.testing.assert_allclose(np.linalg.norm(out.numpy(), axis=-1), 1.0, rtol=1e-3)


def test_encode_methods_take_strings_and_keep_order(tiny_encoder):
    embedder = tiny_encoder.model
    texts = ["boundary layer " * 40, "wing lift", ""]
    documents = embedder.encode_documents(texts)
    np.testing.assert_array_equal(documents, tiny_encoder.encode_documents(texts))
    np.testing.assert_array_equal(embedder.encode_text(texts), documents)
    np.testing.assert_allclose(embedder.encode_text("wing lift"), documents[1:2], atol=1e-6)
    queries = embedder.encode_queries(texts)
    assert not np.allclose(queries[0], documents[0])  # truncated at 64 tokens, documents at 512
    np.testing.assert_allclose(embedder.similarity(queries, documents), queries @ documents.T, atol=1e-6)


def test_predict_on_raw_strings_uses_the_document_budget(tiny_encoder):
    embedder = tiny_encoder.model
    texts = ["boundary layer " * 300, "wing lift"]
    np.testing.assert_allclose(embedder.predict(texts, verbose=0), embedder.encode_documents(texts), atol=1e-6)


@pytest.mark.slow
def test_keras_export_of_a_loaded_preset_serves_strings(tiny_model_dir, tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's op, which loading needs)

    from gtr_keras.exports.savedmodel.export import export_encoder

    embedder = GTRTextEmbedder.from_preset(tiny_model_dir)
    embedder.export(str(tmp_path / "keras-export"), verbose=False)
    loaded = tf.saved_model.load(str(tmp_path / "keras-export"))
    texts = ["boundary layer " * 300, "wing lift", ""]
    strings = tf.constant(texts)
    documents = loaded.signatures["encode_documents"](texts=strings)["embeddings"].numpy()
    np.testing.assert_allclose(documents, embedder.encode_documents(texts), atol=1e-5)
    queries = loaded.signatures["encode_queries"](texts=strings)["embeddings"].numpy()
    np.testing.assert_allclose(queries, embedder.encode_queries(texts), atol=1e-5)
    np.testing.assert_array_equal(loaded(strings).numpy(), documents)
    # One set of signatures, whichever way the encoder is exported.
    cli = tf.saved_model.load(export_encoder(embedder.batch_encoder(), str(tmp_path / "cli"), version=1))
    assert set(cli.signatures) == set(loaded.signatures) == {"serving_default", "encode_documents", "encode_queries"}
    for name in loaded.signatures:
        assert cli.signatures[name].structured_outputs.keys() == loaded.signatures[name].structured_outputs.keys()
        np.testing.assert_array_equal(
            cli.signatures[name](texts=strings)["embeddings"], documents if name != "encode_queries" else queries
        )
    np.testing.assert_array_equal(cli.serve(strings), documents)


@pytest.mark.slow
def test_keras_export_has_the_serve_endpoint_keras_model_export_promises(tiny_encoder, tmp_path):
    """Keras 3's `Model.export` promises `tf.saved_model.load(path).serve(inputs)`: here texts in, the
    documents' embeddings out, beside the named signatures."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's op, which loading needs)

    tiny_encoder.model.export(str(tmp_path / "keras-export"), verbose=False)
    loaded = tf.saved_model.load(str(tmp_path / "keras-export"))
    texts = ["boundary layer " * 300, "wing lift", "", "Ünïcödé 北京"]
    served = loaded.serve(tf.constant(texts))
    assert served.dtype == tf.float32 and served.shape == (len(texts), tiny_encoder.embedding_dim)
    np.testing.assert_allclose(served.numpy(), tiny_encoder.encode_documents(texts), atol=1e-6, rtol=0)
    assert loaded.serve(tf.constant([], tf.string)).shape == (0, tiny_encoder.embedding_dim)
    assert set(loaded.signatures) == {"serving_default", "encode_documents", "encode_queries"}
    np.testing.assert_array_equal(loaded.signatures["serving_default"](texts=tf.constant(texts))["embeddings"], served)


@pytest.mark.parametrize("format", ["onnx", "openvino", "litert", "torch"])
def test_keras_export_to_other_formats_points_to_the_command_line(tiny_encoder, tmp_path, format):
    from gtr_keras.errors import UserError

    with pytest.raises(UserError, match=f"format='{format}' is not supported.*`gtr-keras export --format`"):
        tiny_encoder.model.export(str(tmp_path / "out"), format=format)
    assert not (tmp_path / "out").exists()


BACKEND_SCRIPT = """
import json, sys
import numpy as np
import keras, gtr_keras
assert keras.backend.backend() == sys.argv[1]
embedder = gtr_keras.GTRTextEmbedder.from_preset("gtr_small_distilled_en")
texts = json.loads(sys.argv[2])
np.save(sys.argv[3], np.stack([embedder.encode_queries(texts), embedder.encode_documents(texts)]))
"""


@pytest.mark.large
@pytest.mark.parametrize("backend, module", [("jax", "jax"), ("torch", "torch")])
def test_encode_works_on_the_jax_and_pytorch_backends_as_on_tensorflow(tmp_path, backend, module):
    import importlib.util
    import json
    import os
    import subprocess
    import sys

    from conftest import REPO

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    texts = ["what keeps a wing up?", "", "機械学習 🚀", "boundary layer " * 200]
    result = subprocess.run(
        [sys.executable, "-c", BACKEND_SCRIPT, backend, json.dumps(texts), str(tmp_path / "e.npy")],
        cwd=REPO,
        env={**os.environ, "KERAS_BACKEND": backend},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    other = np.load(tmp_path / "e.npy")
    embedder = GTRTextEmbedder.from_preset("gtr_small_distilled_en")
    np.testing.assert_allclose(other[0], embedder.encode_queries(texts), atol=1e-5, rtol=0)
    np.testing.assert_allclose(other[1], embedder.encode_documents(texts), atol=1e-5, rtol=0)


def test_keras_export_never_writes_into_a_folder_the_user_owns(tiny_encoder, tmp_path):
    from gtr_keras.errors import DataError

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "saved_model.pb").write_bytes(b"my own")
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match=r"mine: not replaced, it holds notes.txt"):
        tiny_encoder.model.export(str(mine), verbose=False)
    assert (mine / "saved_model.pb").read_bytes() == b"my own"
