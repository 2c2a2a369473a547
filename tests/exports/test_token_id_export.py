import json

import numpy as np
import pytest
from runtime_inputs import token_batches

from gtr_keras.errors import DataError, UserError
from gtr_keras.exports.token_id_export import (
    CONFIG_FILE,
    VOCABULARY_FILE,
    forward_function,
    token_id_directory,
    write_token_id_export,
)
from gtr_keras.saving import load_model
from gtr_keras.utils.files import CHECKSUMS_FILE

DIRECTORY = token_id_directory("a test export", ("model.bin",))


def test_the_forward_function_is_the_encoder_at_every_shape(tiny_encoder):
    forward = forward_function(tiny_encoder)
    for ids, mask in token_batches(1100):
        np.testing.assert_array_equal(forward(ids, mask)["embeddings"].numpy(), tiny_encoder.embed_tokens(ids, mask))


def test_a_bfloat16_model_is_refused(tiny_model_dir):
    with pytest.raises(UserError, match="bfloat16: ONNX and OpenVINO exports are float32"):
        forward_function(load_model(tiny_model_dir, dtype="bfloat16"))


def test_the_export_holds_the_model_the_vocabulary_and_the_budgets(tiny_encoder, tmp_path):
    out = tmp_path / "export"
    path = write_token_id_export(
        tiny_encoder, str(out), DIRECTORY, lambda staging: (staging / "model.bin").write_bytes(b"m"), {"format": "x"}
    )
    assert path == str(out / "model.bin")
    assert sorted(p.name for p in out.iterdir()) == [CHECKSUMS_FILE, CONFIG_FILE, "model.bin", VOCABULARY_FILE]
    assert (out / VOCABULARY_FILE).read_bytes() == tiny_encoder.tokenizer.proto
    config = json.loads((out / CONFIG_FILE).read_text())
    assert config["format"] == "x" and config["model_file"] == "model.bin"
    assert (config["query_length"], config["document_length"]) == (tiny_encoder.query_length, 512)
    assert (config["eos_id"], config["pad_id"], config["lowercase"], config["embedding_dim"]) == (1, 0, False, 64)


def test_an_export_replaces_its_own_kind_and_nothing_else(tiny_encoder, tmp_path):
    def write(staging):
        (staging / "model.bin").write_bytes(b"new")

    out = tmp_path / "export"
    write_token_id_export(tiny_encoder, str(out), DIRECTORY, write, {})
    write_token_id_export(tiny_encoder, str(out), DIRECTORY, write, {})
    assert (out / "model.bin").read_bytes() == b"new"
    (out / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="notes.txt"):
        write_token_id_export(tiny_encoder, str(out), DIRECTORY, write, {})
    assert (out / "notes.txt").read_text() == "mine"


def test_a_failed_export_leaves_the_directory_as_it_was(tiny_encoder, tmp_path):
    def fail(staging):
        raise RuntimeError("converter failed")

    out = tmp_path / "export"
    with pytest.raises(RuntimeError, match="converter failed"):
        write_token_id_export(tiny_encoder, str(out), DIRECTORY, fail, {})
    assert not out.exists()
