"""`gtr_keras.load`: a model directory or any export directory gives an encoder with the model's
`encode_queries` and `encode_documents`; ONNX and OpenVINO without TensorFlow, Keras or wrapt."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO
from runtime_inputs import fixture_texts

import gtr_keras
from gtr_keras.errors import DataError, UserError
from gtr_keras.exports import export_formats
from gtr_keras.models.text_encoder import TextEncoder

# Imports of these fail in the subprocess, as if only the runtime, sentencepiece and numpy were installed.
BLOCK = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('tensorflow', 'keras', 'wrapt', 'keras_hub', 'tensorflow_text'):\n"
    "            raise ImportError(f'blocked: {name}')\n"
    "sys.meta_path.insert(0, Block())\n"
)


def _assert_encodes_as_the_model(encoder, tiny_encoder):
    texts = fixture_texts()
    assert isinstance(encoder, TextEncoder)
    for batch_size in (1, 5):
        np.testing.assert_allclose(
            encoder.encode_documents(texts, batch_size=batch_size, progress=False),
            tiny_encoder.encode_documents(texts),
            atol=1e-5,
            rtol=0,
        )
    np.testing.assert_allclose(
        encoder.encode_queries(texts[:4], progress=True), tiny_encoder.encode_queries(texts[:4]), atol=1e-5, rtol=0
    )
    assert encoder.encode_documents([]).shape == (0, tiny_encoder.embedding_dim)


def test_a_model_directory_gives_its_encoder(tiny_model_dir, tiny_encoder):
    _assert_encodes_as_the_model(gtr_keras.load(tiny_model_dir), tiny_encoder)


def test_an_onnx_export_gives_the_models_embeddings(tiny_onnx_export, tiny_encoder):
    pytest.importorskip("onnxruntime")
    encoder = gtr_keras.load(tiny_onnx_export)
    assert type(encoder).__name__ == "RuntimeEncoder" and encoder.runtime == "onnx"
    _assert_encodes_as_the_model(encoder, tiny_encoder)


def test_verify_refuses_a_changed_byte_of_a_model_directory_or_an_export_before_loading(
    tiny_model_dir, tiny_onnx_export, tmp_path
):
    pytest.importorskip("onnxruntime")
    assert gtr_keras.load(tiny_onnx_export, verify=True).runtime == "onnx"
    for source, name in ((tiny_model_dir, "model.weights.h5"), (tiny_onnx_export, "encoder.onnx")):
        copy = tmp_path / os.path.basename(source)
        shutil.copytree(source, copy)
        data = bytearray((copy / name).read_bytes())
        data[len(data) // 2] ^= 0x01
        (copy / name).write_bytes(bytes(data))
        with pytest.raises(DataError, match=f"{copy / name}: its SHA-256 is not the one recorded"):
            gtr_keras.load(copy, verify=True)


def test_an_export_takes_no_model_only_arguments(tiny_onnx_export):
    with pytest.raises(UserError, match="a onnx export takes no document_length, dtype"):
        gtr_keras.load(tiny_onnx_export, dtype="bfloat16", document_length=8)


def test_a_missing_runtime_is_the_export_commands_one_line_hint(tiny_onnx_export, monkeypatch):
    found = export_formats.importlib.util.find_spec
    monkeypatch.setattr(
        export_formats.importlib.util, "find_spec", lambda name: None if name == "onnxruntime" else found(name)
    )
    with pytest.raises(UserError) as error:
        gtr_keras.load(tiny_onnx_export)
    assert str(error.value) == "onnx needs onnxruntime: pip install 'gtr-keras[onnx]'"
    assert export_formats.missing_package_hint(export_formats.FORMATS["onnx"], "write") == str(error.value)


def test_an_onnx_export_loads_without_tensorflow_keras_wrapt_or_tokenizers(tiny_onnx_export):
    """A GTR encoder's ONNX export runs with onnxruntime, sentencepiece and numpy only: Hugging Face's
    `tokenizers` is the reranker's export's need, not this one's."""
    pytest.importorskip("onnxruntime")
    script = BLOCK + (
        "sys.modules['tokenizers'] = None  # as where it is not installed: find_spec answers None\n"
        "import gtr_keras\n"
        f"encoder = gtr_keras.load({tiny_onnx_export!r})\n"
        "print(encoder.encode_documents(['lift on a wing'], batch_size=4, progress=False).shape)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'wrapt')))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["(1, 64)", "[]"]


def test_only_a_rerankers_onnx_export_needs_tokenizers(tiny_onnx_export, tmp_path, monkeypatch, tiny_encoder):
    pytest.importorskip("onnxruntime")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as where it is not installed
    _assert_encodes_as_the_model(gtr_keras.load(tiny_onnx_export), tiny_encoder)
    reranker = tmp_path / "reranker-onnx"  # a reranker's ONNX export, as its files mark it: read after the check
    reranker.mkdir()
    (reranker / "reranker.onnx").write_bytes(b"")
    (reranker / "export.json").write_text('{"format": "onnx", "kind": "reranker"}')
    with pytest.raises(UserError) as error:
        gtr_keras.load(reranker)
    assert str(error.value) == "onnx needs tokenizers: pip install 'gtr-keras[onnx]'"


@pytest.mark.large
def test_every_export_format_gives_the_models_embeddings(tiny_model_dir, tiny_encoder, tmp_path):
    """What the acceptance check does: `gtr-keras export` in each format, then `gtr_keras.load(DIR)`."""
    from gtr_keras.cli.main import main

    directories = {"savedmodel": str(tmp_path / "savedmodel" / "encoder" / "1")}
    assert main(["export", "--model", tiny_model_dir, "--out", str(tmp_path / "savedmodel")]) == 0
    for name in ("litert", "onnx", "openvino"):
        if export_formats.missing_package_hint(export_formats.FORMATS[name], "write"):
            continue
        directories[name] = str(tmp_path / name)
        assert main(["export", "--model", tiny_model_dir, "--format", name, "--out", directories[name]]) == 0
    assert {"savedmodel", "litert"} <= set(directories)
    for name, directory in directories.items():
        assert export_formats.format_of_directory(directory).name == name
        _assert_encodes_as_the_model(gtr_keras.load(directory), tiny_encoder)
    if "openvino" in directories:
        script = BLOCK + (
            f"import gtr_keras\nprint(gtr_keras.load({directories['openvino']!r}).encode_queries(['x']).shape)\n"
        )
        result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.splitlines() == ["(1, 64)"]
    assert os.path.isfile(os.path.join(directories["litert"], "encoder.tflite"))
