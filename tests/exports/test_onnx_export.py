import glob
import json
import os

import numpy as np
import pytest
from runtime_inputs import fixture_texts, token_batches

from gtr_keras.cli.main import main
from gtr_keras.errors import UserError
from gtr_keras.exports.savedmodel.loader import load_export

pytest.importorskip("tf2onnx", reason="tf2onnx is not installed (pip install 'gtr-keras[onnx]')")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'gtr-keras[onnx]')")

from gtr_keras.exports.onnx_export import ONNX_FILE, export_onnx  # noqa: E402
from gtr_keras.exports.runtime_encoder import RuntimeEncoder  # noqa: E402


@pytest.fixture(scope="module")
def onnx_exports(tmp_path_factory, tiny_encoder, tiny_onnx_export):
    int8 = export_onnx(tiny_encoder, str(tmp_path_factory.mktemp("onnx") / "int8"), "int8")
    return {None: os.path.join(tiny_onnx_export, ONNX_FILE), "int8": int8}


def test_onnx_runtime_matches_the_model_at_dynamic_batch_sizes_and_lengths(onnx_exports, tiny_encoder):
    runtime = RuntimeEncoder(os.path.dirname(onnx_exports[None]))
    for ids, mask in token_batches(1100):
        np.testing.assert_allclose(runtime.embed_tokens(ids, mask), tiny_encoder.embed_tokens(ids, mask), atol=1e-5)


def test_int8_is_smaller_and_close(onnx_exports, tiny_encoder):
    runtime = RuntimeEncoder(os.path.dirname(onnx_exports["int8"]))
    assert os.path.getsize(onnx_exports["int8"]) < 0.6 * os.path.getsize(onnx_exports[None])
    for ids, mask in token_batches(1100):
        cosines = np.sum(runtime.embed_tokens(ids, mask) * tiny_encoder.embed_tokens(ids, mask), axis=1)
        assert cosines.min() > 0.99


def test_an_unknown_quantization_is_refused(tiny_encoder, tmp_path):
    with pytest.raises(UserError, match="quantize must be None or one of int8, got 'int4'"):
        export_onnx(tiny_encoder, str(tmp_path / "out"), "int4")
    assert not (tmp_path / "out").exists()


@pytest.mark.large
def test_cli_onnx_export_matches_the_savedmodel_on_strings(tiny_model_dir, tmp_path):
    assert main(["export", "--model", tiny_model_dir, "--out", str(tmp_path / "saved")]) == 0
    assert main(["export", "--model", tiny_model_dir, "--out", str(tmp_path / "onnx"), "--format", "onnx"]) == 0
    assert [os.path.basename(p) for p in glob.glob(str(tmp_path / "onnx" / "**" / "*.onnx"), recursive=True)] == [
        ONNX_FILE
    ]
    saved = load_export(str(tmp_path / "saved" / "encoder" / "1"))
    runtime = RuntimeEncoder(tmp_path / "onnx")
    texts = fixture_texts()
    for kind, signature in (("query", "encode_queries"), ("document", "encode_documents")):
        expected = saved.signatures[signature](texts=np.array(texts, dtype=object))["embeddings"].numpy()
        for batch_size in (1, 5, len(texts)):
            np.testing.assert_allclose(runtime.encode(texts, kind, batch_size), expected, atol=1e-5)
    config = json.loads((tmp_path / "onnx" / "export.json").read_text())
    assert (config["format"], config["quantize"], config["query_length"], config["document_length"]) == (
        "onnx",
        None,
        64,
        512,
    )


@pytest.mark.large
def test_an_onnx_export_on_ram_is_written_as_a_unit(tiny_encoder):
    from gtr_keras.utils import files

    path = export_onnx(tiny_encoder, "ram://onnx-export/gtr")
    assert path == "ram://onnx-export/gtr/encoder.onnx"
    assert sorted(files.listdir("ram://onnx-export/gtr")) == [
        "checksums.json",
        "encoder.onnx",
        "export.json",
        "spiece.model",
    ]
    assert json.loads(files.read_bytes("ram://onnx-export/gtr/export.json"))["document_length"] == 512


@pytest.mark.large
def test_the_onnx_export_prints_no_tensorflow_cpp_log_lines(tiny_model_dir, tmp_path, capfd):
    capfd.readouterr()
    assert main(["export", "--model", tiny_model_dir, "--out", str(tmp_path / "onnx"), "--format", "onnx"]) == 0
    captured = capfd.readouterr()
    assert "devices.cc" not in captured.err and "absl::InitializeLog" not in captured.err, captured.err
    assert captured.out.startswith("wrote ")
