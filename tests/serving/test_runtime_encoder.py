import json
import shutil

import numpy as np
import pytest
from runtime_inputs import fixture_texts

from gtr_keras.errors import DataError, UserError

pytest.importorskip("tf2onnx", reason="tf2onnx is not installed (pip install 'gtr-keras[onnx]')")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'gtr-keras[onnx]')")

from gtr_keras.serving.runtime_encoder import RuntimeEncoder  # noqa: E402


@pytest.fixture(scope="module")
def export_dir(tiny_onnx_export):
    return tiny_onnx_export


def test_token_ids_are_the_encoders_with_each_budget(export_dir, tiny_encoder):
    runtime = RuntimeEncoder(export_dir)
    texts = fixture_texts()
    for kind in ("query", "document"):
        assert runtime.tokenize(texts, kind) == tiny_encoder.tokenize(texts, kind)
    assert max(map(len, runtime.tokenize(texts, "query"))) == 64
    assert runtime.tokenize([b"\xffwing"], "query") == runtime.tokenize(["\ufffdwing"], "query")


def test_encode_gives_the_encoders_embeddings_in_input_order(export_dir, tiny_encoder):
    runtime = RuntimeEncoder(export_dir)
    texts = fixture_texts()
    for batch_size in (1, 7):
        np.testing.assert_allclose(
            runtime.encode_documents(texts, batch_size), tiny_encoder.encode_documents(texts), atol=1e-5
        )
    np.testing.assert_allclose(runtime.encode_queries(texts[:3]), tiny_encoder.encode_queries(texts[:3]), atol=1e-5)
    assert runtime.encode_queries([]).shape == (0, 64)


def test_a_lowercasing_export_lowercases(export_dir, tmp_path):
    shutil.copytree(export_dir, tmp_path / "lower")
    config = json.loads((tmp_path / "lower" / "export.json").read_text())
    (tmp_path / "lower" / "export.json").write_text(json.dumps({**config, "lowercase": True}))
    lower = RuntimeEncoder(tmp_path / "lower")
    assert lower.tokenize(["Wing LIFT"]) == RuntimeEncoder(export_dir).tokenize(["wing lift"])


def test_what_is_not_an_export_is_refused(export_dir, tmp_path):
    with pytest.raises(DataError, match="export.json: no such file"):
        RuntimeEncoder(tmp_path)
    with pytest.raises(UserError, match="kind must be 'query' or 'document', got 'passage'"):
        RuntimeEncoder(export_dir).encode(["x"], "passage")
    (tmp_path / "export.json").write_text(json.dumps({"format": "savedmodel"}))
    with pytest.raises(DataError, match="format 'savedmodel' is not one of onnx, openvino"):
        RuntimeEncoder(tmp_path)
