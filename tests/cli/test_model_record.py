"""An index or shard record names the directory a model was read from, also for a model given by name
(`--model gtr_small_distilled_en`), and the mismatch messages point there."""

import json

from gtr_keras.cli.main import main
from gtr_keras.models.gtr.presets import BUNDLED_MODEL_DIR


def test_a_bundled_model_given_by_name_is_recorded_and_named_as_its_directory(
    tmp_path, monkeypatch, capsys, tiny_model_dir
):
    from gtr_keras.retrieval.index_building import index_metadata
    from gtr_keras.saving import load_model

    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"text {i}"}) + "\n" for i in range(3)))
    assert main(["index", "--model", "gtr_small_distilled_en", "--corpus", str(corpus), "--out", "index"]) == 0
    assert json.loads((tmp_path / "index" / "retriever.json").read_text())["model_dir"] == BUNDLED_MODEL_DIR
    assert main(["encode", "--model", "gtr_small_distilled_en", "--input", str(corpus), "--output", "emb.npy"]) == 0
    assert json.loads((tmp_path / "emb.json").read_text())["model"]["model_dir"] == BUNDLED_MODEL_DIR
    capsys.readouterr()
    assert main(["search", "a query", "--index", "index", "--model", tiny_model_dir]) == 2
    assert f"recorded model_dir: {BUNDLED_MODEL_DIR})" in capsys.readouterr().err
    assert main(["index", "--embeddings", "emb.npy", "--model", tiny_model_dir, "--out", "by-emb"]) == 2
    assert f"recorded model_dir: {BUNDLED_MODEL_DIR})" in capsys.readouterr().err
    encoder = load_model("gtr_small_distilled_en")
    assert index_metadata(encoder, "gtr_small_distilled_en")["model_dir"] == BUNDLED_MODEL_DIR
    assert index_metadata(encoder, "gtr-tiny")["model_dir"] == "gtr-tiny"  # an architecture: no directory
