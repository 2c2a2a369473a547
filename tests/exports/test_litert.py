import glob
import os

import numpy as np
import pytest
import tensorflow as tf
from doc_snippets import python_blocks

from gtr_keras.cli.main import main
from gtr_keras.errors import UserError
from gtr_keras.exports.litert import LITERT_FILE, check_litert_export, load_litert
from gtr_keras.exports.savedmodel.export import export_encoder
from gtr_keras.exports.savedmodel.loader import load_export

TEXTS = [
    "what is the lift of a wing?",
    "",
    "boundary layer " * 400,  # past both budgets
    "Ünïcödé 北京",
    "  \t surrounding whitespace \n",
    "heat transfer",
]


@pytest.fixture(scope="module")
def litert_and_saved_model(tmp_path_factory, tiny_model_dir, tiny_encoder):
    """The tiny model's `export --format litert` (through the command line) and its SavedModel export."""
    root = tmp_path_factory.mktemp("litert")
    assert main(["export", "--model", tiny_model_dir, "--format", "litert", "--out", str(root / "litert")]) == 0
    export_encoder(tiny_encoder, str(root / "savedmodel"))
    return root, load_export(str(root / "savedmodel" / "encoder" / "1"))


@pytest.mark.slow
def test_the_litert_export_runs_in_the_interpreter_as_the_saved_model_does(litert_and_saved_model, tiny_encoder):
    root, saved_model = litert_and_saved_model
    found = glob.glob(str(root / "litert" / "**" / "*.tflite"), recursive=True)
    assert found == [str(root / "litert" / LITERT_FILE)]
    interpreter = load_litert(found[0])
    assert set(interpreter.get_signature_list()) == {"encode_documents", "encode_queries"}
    lengths = set()
    budgets = {"encode_queries": tiny_encoder.query_length, "encode_documents": tiny_encoder.document_length}
    for signature, length in budgets.items():
        runner = interpreter.get_signature_runner(signature)
        # Batch sizes 1 to 6 and lengths from 1 token (EOS alone) to each budget, in one interpreter.
        for batch in (TEXTS, TEXTS[:1], TEXTS[1:2], TEXTS[2:4], TEXTS[3:], TEXTS[::-1]):
            embeddings = runner(texts=np.array(batch, dtype=object))["embeddings"]
            expected = saved_model.signatures[signature](texts=tf.constant(batch))["embeddings"].numpy()
            assert embeddings.shape == expected.shape == (len(batch), tiny_encoder.embedding_dim)
            np.testing.assert_allclose(embeddings, expected, atol=1e-5)
            lengths.add(int(tiny_encoder.tokenizer.dense_token_ids(batch, length)["token_ids"].shape[1]))
    assert {1, tiny_encoder.query_length} <= lengths and max(lengths) > tiny_encoder.query_length
    for signature in budgets:  # 0 texts: [0, D], as every other encoder gives
        empty = interpreter.get_signature_runner(signature)(texts=np.array([], dtype=object))["embeddings"]
        assert empty.shape == (0, tiny_encoder.embedding_dim) and empty.dtype == np.float32


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*tf.lite.Interpreter is deprecated")  # the snippet's interpreter, TF Text's target
def test_the_docs_interpreter_answers_0_and_2_texts(litert_and_saved_model, tiny_encoder, tmp_path, monkeypatch):
    """docs/serving.md's snippet: TFLite's own interpreter (its default delegates, XNNPACK's among them) with TF
    Text's ops registered, nothing of gtr-keras; 0 texts give `[0, D]` from the flatbuffer itself."""
    root, _ = litert_and_saved_model
    os.makedirs(tmp_path / "exports")
    os.symlink(root / "litert", tmp_path / "exports" / "gtr")
    monkeypatch.chdir(tmp_path)
    (snippet,) = python_blocks("docs/serving.md", "LiteRT")
    namespace = {}
    exec(snippet, namespace)
    assert namespace["queries"].shape == (1, tiny_encoder.embedding_dim)
    for signature, kind in (("encode_queries", "query"), ("encode_documents", "document")):
        runner = namespace["interpreter"].get_signature_runner(signature)
        for texts in ([], ["what keeps a wing up?", "boundary layer " * 400]):
            embeddings = runner(texts=np.array(texts, dtype=object))["embeddings"]
            assert embeddings.dtype == np.float32 and embeddings.shape == (len(texts), tiny_encoder.embedding_dim)
            np.testing.assert_allclose(embeddings, tiny_encoder.encode(texts, kind), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_the_converters_print_no_tensorflow_cpp_log_lines(litert_and_saved_model, tiny_model_dir, tmp_path, capfd):
    capfd.readouterr()
    assert main(["export", "--model", tiny_model_dir, "--format", "litert", "--out", str(tmp_path / "litert")]) == 0
    err = capfd.readouterr().err
    assert "devices.cc" not in err and "absl::InitializeLog" not in err and "single_machine.cc" not in err, err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--index", "."], "argument --index: the searcher is a SavedModel; --format litert exports the encoder"),
        (["--precision", "bfloat16"], "argument --precision: --format litert exports float32"),
    ],
)
def test_litert_refuses_a_searcher_and_bfloat16_in_one_line(tiny_model_dir, tmp_path, capsys, flags, message):
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "retriever.json").write_text("{}")
    flags = [str(tmp_path / "index") if flag == "." else flag for flag in flags]
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--model", tiny_model_dir, "--format", "litert", "--out", str(tmp_path / "out"), *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_what_a_litert_export_cannot_hold_or_replace_is_refused_before_the_work(tiny_encoder, tmp_path, monkeypatch):
    (tmp_path / LITERT_FILE).mkdir()
    with pytest.raises(UserError, match=f"{LITERT_FILE}: is a directory"):
        check_litert_export(tiny_encoder, tmp_path)
    monkeypatch.setattr(tiny_encoder.tokenizer, "lowercase", True)
    with pytest.raises(UserError, match="lowercase=True"):
        check_litert_export(tiny_encoder, tmp_path / "other")
