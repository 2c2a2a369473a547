"""`export --reranker`: a strings-in SavedModel (TF Serving, `hub.load`) and ONNX, scoring as `predict` does."""

import json
import sys

import numpy as np
import pytest
from reranker_inputs import PAIRS, REFERENCE

import gtr_keras
from gtr_keras.cli.main import main
from gtr_keras.errors import UserError


@pytest.mark.large
@pytest.mark.parametrize("family", ["bert", "xlmr"])
def test_the_savedmodel_scores_pairs_as_the_reranker(tmp_path, reranker_dirs, family):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's ops)

    assert main(["export", "--reranker", reranker_dirs[family], "--out", str(tmp_path / "exports")]) == 0
    path = tmp_path / "exports" / "reranker" / "1"
    loaded = tf.saved_model.load(str(path))
    queries, documents = (tf.constant([pair[side] for pair in PAIRS]) for side in (0, 1))
    scores = loaded.signatures["serving_default"](queries=queries, documents=documents)["scores"].numpy()
    np.testing.assert_allclose(scores, REFERENCE[family]["scores"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(loaded(queries, documents).numpy(), scores, atol=1e-6)
    one_query = loaded.signatures["rerank"](query=queries[0], documents=documents)["scores"].numpy()
    expected = gtr_keras.load(reranker_dirs[family]).predict([(PAIRS[0][0], d) for _, d in PAIRS])
    np.testing.assert_allclose(one_query, expected, atol=1e-5, rtol=0)
    scorer = gtr_keras.load(str(path))
    np.testing.assert_allclose(scorer.predict(PAIRS, batch_size=5), REFERENCE[family]["scores"], atol=1e-5, rtol=0)
    assert (path / "assets.extra" / "tf_serving_warmup_requests").is_file()
    assert main(["check", str(tmp_path / "exports")]) == 0


@pytest.mark.large
@pytest.mark.parametrize("family", ["bert", "xlmr"])
def test_the_onnx_export_with_its_tokenizer_on_the_host_scores_as_the_reranker(
    tmp_path, reranker_dirs, family, capsys, monkeypatch
):
    out = tmp_path / "onnx"
    assert main(["export", "--reranker", reranker_dirs[family], "--out", str(out), "--format", "onnx"]) == 0
    assert json.loads((out / "export.json").read_text())["kind"] == "reranker"
    scorer = gtr_keras.load(str(out))
    assert type(scorer).__name__ == "RuntimeScorer"
    np.testing.assert_allclose(scorer.predict(PAIRS, batch_size=4), REFERENCE[family]["scores"], atol=1e-5, rtol=0)
    capsys.readouterr()
    assert main(["check", str(out)]) == 0
    assert "a reranker's onnx export; runs with onnxruntime, tokenizers;" in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as where it is not installed
    with pytest.raises(UserError, match=r"^onnx needs tokenizers: pip install 'gtr-keras\[onnx\]'$"):
        gtr_keras.load(str(out))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--format", "litert"], "argument --reranker: --format litert exports GTR encoders"),
        (["--model", "gtr_small_distilled_en"], "one of the arguments --model or --reranker is required, not both"),
        (["-k", "3"], "argument -k: does not apply to a reranker's export"),
        (["--format", "onnx", "--quantize", "int8"], "argument --quantize: does not apply to a reranker's export"),
    ],
)
def test_flags_a_rerankers_export_does_not_take_are_exit_2(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as stopped:
        main(["export", "--reranker", str(tmp_path), "--out", str(tmp_path / "out"), *argv])
    assert stopped.value.code == 2 and message in capsys.readouterr().err
