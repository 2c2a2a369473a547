"""`write_preset`: a model directory replaced as a unit, with the weights' dtype and the vocabulary's SHA-256."""

import hashlib
import json

import pytest

import gtr_keras
from gtr_keras.models.gtr.gtr_tokenizer import METADATA_FILE, VOCABULARY_SHA256
from gtr_keras.models.model_files.preset_writer import write_preset


def test_a_save_that_fails_midway_leaves_the_previous_directory_whole(tiny_encoder, tmp_path):
    target = tmp_path / "model"
    tiny_encoder.model.save_to_preset(str(target))
    before = {path.name: path.read_bytes() for path in target.iterdir() if path.is_file()}

    def killed(staging):
        with open(f"{staging}/config.json", "w") as f:
            f.write("{")  # half written
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_preset(tiny_encoder.model, target, killed)
    assert {path.name: path.read_bytes() for path in target.iterdir() if path.is_file()} == before


def test_the_vocabulary_hash_and_the_weights_dtype_are_recorded(tiny_encoder, tmp_path):
    embedder = tiny_encoder.model

    def save(staging):
        (tmp_path / "staged").write_text(staging)
        with open(f"{staging}/config.json", "w") as f:
            json.dump({"config": {"dtype": {"class_name": "DTypePolicy", "config": {"name": "mixed_bfloat16"}}}}, f)
        with open(f"{staging}/{METADATA_FILE}", "w") as f:
            json.dump({"keras_version": "3"}, f)

    write_preset(embedder, tmp_path / "out", save)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["config"]["dtype"]["config"]["name"] == "float32"
    metadata = json.loads((tmp_path / "out" / METADATA_FILE).read_text())
    assert metadata == {
        "keras_version": "3",
        VOCABULARY_SHA256: hashlib.sha256(embedder.preprocessor.tokenizer.proto).hexdigest(),
    }
    assert (tmp_path / "staged").read_text() != str(tmp_path / "out")  # written elsewhere, then moved


def test_a_quantized_model_is_refused_before_anything_is_written(tmp_path):
    embedder = gtr_keras.GTRTextEmbedder.from_architecture("gtr-tiny")
    embedder.projection.quantize("int8")
    with pytest.raises(gtr_keras.CheckpointError, match="a quantized model .*int8"):
        write_preset(embedder, tmp_path / "q", lambda staging: pytest.fail("saved"))
    assert not (tmp_path / "q").exists()
