import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO
from doc_snippets import python_blocks
from runtime_inputs import fixture_texts

from gtr_keras.errors import DataError, UserError

pytest.importorskip("tf2onnx", reason="tf2onnx is not installed (pip install 'gtr-keras[onnx]')")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'gtr-keras[onnx]')")

from gtr_keras.exports.runtime_encoder import RuntimeEncoder  # noqa: E402


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
    with pytest.raises(DataError, match='field \'format\' must be one of "onnx", "openvino", got "savedmodel"'):
        RuntimeEncoder(tmp_path)


def _edited(export_dir, tmp_path, **changes):
    shutil.copytree(export_dir, tmp_path / "edited")
    path = tmp_path / "edited" / "export.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return tmp_path / "edited"


@pytest.mark.parametrize(
    "field, value",
    [
        ("document_length", 0),
        ("query_length", "64"),
        ("eos_id", 2),
        ("eos_id", None),
        ("pad_id", -1),
        ("lowercase", "no"),
        ("embedding_dim", 1.5),
        ("vocabulary", "../spiece.model"),
        ("model_file", "/etc/passwd"),
        ("vocabulary_sha256", "0" * 64),
    ],
)
def test_an_edited_export_json_is_refused_naming_its_field(export_dir, tmp_path, field, value):
    with pytest.raises(DataError, match=rf"export.json: field '{field}'|spiece.model: not the vocabulary"):
        RuntimeEncoder(_edited(export_dir, tmp_path, **{field: value}))


def test_another_vocabulary_beside_the_model_is_refused(export_dir, tmp_path):
    edited = _edited(export_dir, tmp_path)
    (edited / "spiece.model").write_bytes((edited / "spiece.model").read_bytes() + b"\n")
    with pytest.raises(DataError, match="spiece.model: not the vocabulary the model was exported with"):
        RuntimeEncoder(edited)


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"format": "onnx"}'])
def test_a_malformed_export_json_is_one_data_error(export_dir, tmp_path, text):
    edited = _edited(export_dir, tmp_path)
    (edited / "export.json").write_text(text)
    with pytest.raises(DataError, match="export.json: "):
        RuntimeEncoder(edited)


def test_unicode_whitespace_at_the_ends_is_kept_as_the_model_keeps_it(export_dir, tiny_encoder):
    texts = ["\x85wing lift\x85", "\u00a0drag\u2028", " \t plain \n"]
    assert RuntimeEncoder(export_dir).tokenize(texts) == tiny_encoder.tokenize(texts, "document")


@pytest.mark.large
def test_the_docs_onnx_and_openvino_snippets_run(export_dir, tiny_encoder, tmp_path, monkeypatch, capsys):
    pytest.importorskip("openvino", reason="openvino is not installed (pip install 'gtr-keras[openvino]')")
    from gtr_keras.exports.openvino_export import export_openvino

    shutil.copytree(export_dir, tmp_path / "exports" / "gtr-onnx")
    export_openvino(tiny_encoder, str(tmp_path / "exports" / "gtr-openvino"))
    monkeypatch.chdir(tmp_path)
    snippets = python_blocks("docs/serving.md", "ONNX and OpenVINO")
    assert len(snippets) == 2
    onnx_names = {}
    exec(snippets[0], onnx_names)
    texts = ["GTR is a dual encoder.", "BM25 is a bag-of-words ranker."]
    np.testing.assert_allclose(onnx_names["documents"], tiny_encoder.encode_documents(texts), atol=1e-5)
    np.testing.assert_allclose(onnx_names["queries"], tiny_encoder.encode_queries(["what is GTR?"]), atol=1e-5)
    exec(snippets[1], {})
    assert capsys.readouterr().out.startswith("[[")


@pytest.mark.large
def test_a_runtime_encoder_loads_no_tensorflow_nor_wrapt(export_dir):
    script = (
        "import sys\nfrom gtr_keras.exports.runtime_encoder import RuntimeEncoder\n"
        f"print(RuntimeEncoder({export_dir!r}).encode_queries(['wing lift']).shape)\n"
        "print(sorted(m for m in ('tensorflow', 'keras', 'wrapt') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["(1, 64)", "[]"]
