"""A model directory whose settings contradict its weights (or each other) does not load: the error names the
file and the setting, whichever loader reads it."""

import json
import re
import shutil

import h5py
import keras_hub
import numpy as np
import pytest
from conftest import FIXTURES

import gtr_keras
from gtr_keras.errors import CheckpointError

LOADERS = {
    "gtr_keras.load": gtr_keras.load,
    "TextEmbedder.from_preset": keras_hub.models.TextEmbedder.from_preset,
    "Backbone.from_preset": keras_hub.models.Backbone.from_preset,
}


def edited(source, directory, file, keys, value):
    """A copy of model directory `source` with the setting at `keys` of JSON `file` set to `value`."""
    copy = shutil.copytree(source, directory)
    config = json.loads((copy / file).read_text())
    node = config
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    (copy / file).write_text(json.dumps(config))
    return copy


def assert_refused(directory, message, load=gtr_keras.load):
    with pytest.raises(CheckpointError, match=f"^{re.escape(f'{directory}/{message}')}$"):
        load(str(directory))


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_fewer_layers_than_the_weights_hold_fail_in_every_loader(tiny_model_dir, tmp_path, loader):
    directory = edited(tiny_model_dir, tmp_path / "m", "config.json", ["config", "num_layers"], 2)
    assert_refused(
        directory, "config.json: num_layers is 2 but model.weights.h5 holds 3 encoder blocks", LOADERS[loader]
    )


BACKBONE = ["config", "backbone", "config"]


@pytest.mark.parametrize(
    "file, keys, value, message",
    [
        (
            "config.json",
            ["config", "num_layers"],
            4,
            "config.json: num_layers is 4 but model.weights.h5 holds 3 encoder blocks",
        ),
        (
            "config.json",
            ["config", "vocabulary_size"],
            1000,
            "config.json: vocabulary_size is 1000 but model.weights.h5 holds 1100 token embedding rows",
        ),
        (
            "config.json",
            ["config", "intermediate_dim"],
            64,
            "config.json: intermediate_dim is 64 but model.weights.h5 holds 128-dimensional feed-forward layers",
        ),
        (
            "config.json",
            ["config", "feedforward"],
            "gated-gelu",
            "config.json: feedforward is 'gated-gelu' but model.weights.h5 holds relu feed-forward layers",
        ),
        (
            "task.json",
            BACKBONE + ["num_layers"],
            2,
            "task.json: backbone.num_layers is 2 but model.weights.h5 holds 3 encoder blocks",
        ),
        (
            "task.json",
            BACKBONE + ["hidden_dim"],
            32,
            "task.json: backbone.hidden_dim is 32 but model.weights.h5 holds 64-dimensional token embeddings",
        ),
        (
            "task.json",
            BACKBONE + ["num_heads"],
            8,
            "task.json: backbone.num_heads is 8 but model.weights.h5 holds relative position biases for 4 heads",
        ),
        (
            "task.json",
            BACKBONE + ["key_value_dim"],
            4,
            "task.json: backbone.key_value_dim is 4 but model.weights.h5 holds attention projections of 8 dimensions "
            "per head",
        ),
        (
            "task.json",
            ["config", "embedding_dim"],
            32,
            "task.json: embedding_dim is 32 but task.weights.h5 holds a projection to 64 dimensions",
        ),
        (
            "task.json",
            ["config", "preprocessor", "config", "sequence_length"],
            1,
            "task.json: preprocessor.sequence_length must be at least 2 (one token and EOS), got 1",
        ),
        (
            "preprocessor.json",
            ["config", "sequence_length"],
            1,
            "preprocessor.json: sequence_length must be at least 2 (one token and EOS), got 1",
        ),
        (
            "preprocessor.json",
            ["config", "query_length"],
            0,
            "preprocessor.json: query_length must be at least 2 (one token and EOS), got 0",
        ),
        (
            "preprocessor.json",
            ["config", "query_length"],
            32,
            "preprocessor.json: query_length is 32 but the preprocessor in task.json has 64 "
            "(TextEmbedder.from_preset reads task.json); make them agree",
        ),
        (
            "config.json",
            ["config", "layer_norm_epsilon"],
            1e-5,
            "config.json: layer_norm_epsilon is 1e-05 but the backbone in task.json has 1e-06 "
            "(TextEmbedder.from_preset reads task.json); make them agree",
        ),
    ],
)
def test_a_setting_that_contradicts_the_weights_is_named(tiny_model_dir, tmp_path, file, keys, value, message):
    assert_refused(edited(tiny_model_dir, tmp_path / "m", file, keys, value), message)


def test_weights_files_must_hold_exactly_the_models_weights(tiny_model_dir, tmp_path):
    extra = shutil.copytree(tiny_model_dir, tmp_path / "extra")
    with h5py.File(extra / "model.weights.h5", "a") as f:
        f["junk/vars/0"] = np.zeros(3)
    assert_refused(extra, "model.weights.h5: holds junk/vars/0, which the model built from its config does not have")
    missing = shutil.copytree(tiny_model_dir, tmp_path / "missing")
    with h5py.File(missing / "model.weights.h5", "a") as f:
        del f["final_norm/vars/0"]
    assert_refused(missing, "model.weights.h5: no weight for final_norm/scale")


def test_sharded_weights_are_checked_too(tiny_model_dir, tmp_path):
    embedder = gtr_keras.load(tiny_model_dir).model
    embedder.save_to_preset(str(tmp_path / "sharded"), max_shard_size=0.0003)
    assert (tmp_path / "sharded" / "model_00001.weights.h5").exists()
    again = keras_hub.models.TextEmbedder.from_preset(str(tmp_path / "sharded"))
    np.testing.assert_array_equal(again.encode_documents(["wing lift"]), embedder.encode_documents(["wing lift"]))
    directory = edited(tmp_path / "sharded", tmp_path / "m", "config.json", ["config", "num_layers"], 2)
    assert_refused(
        directory,
        "config.json: num_layers is 2 but model.weights.json holds 3 encoder blocks",
        keras_hub.models.Backbone.from_preset,
    )


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("removed", ["task.weights.h5", "task.json"])
def test_a_directory_without_its_task_does_not_load_with_a_random_projection(tiny_model_dir, tmp_path, loader, removed):
    copy = shutil.copytree(tiny_model_dir, tmp_path / "m")
    for name in ("task.weights.h5", "task.json")[: 1 + (removed == "task.json")]:
        (copy / name).unlink()
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(copy / removed))}: missing"):
        LOADERS[loader](str(copy))


@pytest.mark.parametrize(
    "file, dataset, weight",
    [
        ("model.weights.h5", "layers/embedding/vars/0", "token_embedding/embeddings"),
        ("task.weights.h5", "layers/dense/vars/0", "projection/kernel"),
    ],
)
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_non_finite_weights_are_refused_naming_the_file_and_the_weight(
    tiny_model_dir, tmp_path, file, dataset, weight, loader
):
    if loader == "Backbone.from_preset" and file == "task.weights.h5":
        pytest.skip("the backbone holds no task weights")
    copy = shutil.copytree(tiny_model_dir, tmp_path / "m")
    with h5py.File(copy / file, "r+") as f:
        values = f[dataset][()]
        values.flat[3], values.flat[5] = np.nan, np.inf
        f[dataset][...] = values
    with pytest.raises(CheckpointError, match=f"{re.escape(str(copy / file))}: weight {weight} holds 2 non-finite"):
        LOADERS[loader](str(copy))


def test_a_model_giving_non_finite_embeddings_writes_nothing(tiny_model_dir, tmp_path, capsys):
    from gtr_keras.cli.main import main

    encoder = gtr_keras.load(tiny_model_dir)
    kernel = encoder.model.projection.kernel
    kernel.assign(np.full(kernel.shape, 3e38, "float32"))  # finite weights whose sums overflow
    with pytest.raises(CheckpointError, match="non-finite embeddings .* for 2 of 2 documents"):
        encoder.encode(["a", "b"])
    gtr_keras.save(encoder, tmp_path / "m")
    (tmp_path / "t.txt").write_text("a\nb\n")
    argv = ["encode", "--model", str(tmp_path / "m"), "--input", str(tmp_path / "t.txt"), "--output"]
    assert main([*argv, str(tmp_path / "e.npy")]) == 2
    assert "non-finite embeddings" in capsys.readouterr().err and not (tmp_path / "e.npy").exists()


def _edit_tokenizer_config(directory, key, value):
    for name in ("tokenizer.json", "preprocessor.json", "task.json"):
        config = json.loads((directory / name).read_text())

        def walk(node):
            if isinstance(node, dict):
                if node.get("class_name") == "GTRTokenizer":
                    node["config"][key] = value
                for child in node.values():
                    walk(child)

        walk(config)
        (directory / name).write_text(json.dumps(config))


def _another_vocabulary(tmp_path, size):
    from gtr_keras.models.gtr.gtr_tokenizer import train_sentencepiece

    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(np.random.default_rng(i).choice(letters, 7)) for i in range(6000)]
    texts = [" ".join(words[i : i + 6]) for i in range(0, 6000, 6)]
    return train_sentencepiece(texts, str(tmp_path / "other.model"), vocabulary_size=size)


@pytest.mark.parametrize(
    "damage",
    [
        "more pieces than rows",
        "empty vocabulary",
        "config_file outside",
        "proto outside",
        "task class from another module",
    ],
)
def test_a_hostile_or_damaged_preset_is_exit_2_and_one_line(tiny_model_dir, tmp_path, capsys, damage):
    from gtr_keras.cli.main import main

    copy = shutil.copytree(tiny_model_dir, tmp_path / "m")
    vocabulary = copy / "assets" / "tokenizer" / "vocabulary.spm"
    outside = tmp_path / "outside"
    (outside / "x").mkdir(parents=True)
    shutil.copy(FIXTURES + "/tiny-gtr-st/spiece.model", outside / "x" / "vocabulary.spm")
    if damage == "more pieces than rows":
        vocabulary.write_bytes(open(_another_vocabulary(tmp_path, 1500), "rb").read())
        metadata = json.loads((copy / "metadata.json").read_text())
        del metadata["vocabulary_sha256"]  # as in a preset saved before the hash was recorded
        (copy / "metadata.json").write_text(json.dumps(metadata))
        expected = "pieces, but the model has 1100 token embedding rows (config.json vocabulary_size)"
    elif damage == "empty vocabulary":
        vocabulary.write_bytes(b"")
        expected = f"{vocabulary}: empty (no SentencePiece model)"
    elif damage == "config_file outside":
        _edit_tokenizer_config(copy, "config_file", str(outside / "x.json"))
        expected = "is not a file name: a model directory reads only its own files"
    elif damage == "proto outside":
        _edit_tokenizer_config(copy, "proto", str(outside / "x" / "vocabulary.spm"))
        expected = "outside of the model archive"
    else:
        task = json.loads((copy / "task.json").read_text())
        task.update(module="os", class_name="system", registered_name=None)
        (copy / "task.json").write_text(json.dumps(task))
        expected = f"{copy / 'task.json'}: names None, not 'gtr_keras>GTRTextEmbedder'"
    (tmp_path / "t.txt").write_text("a\n")
    assert (
        main(["encode", "--model", str(copy), "--input", str(tmp_path / "t.txt"), "--output", str(tmp_path / "e.npy")])
        == 2
    )
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and expected in error, error


def test_a_vocabulary_swapped_for_another_models_is_refused_by_its_recorded_hash(tiny_model_dir, tmp_path):
    copy = shutil.copytree(tiny_model_dir, tmp_path / "m")
    recorded = json.loads((copy / "metadata.json").read_text())["vocabulary_sha256"]
    vocabulary = copy / "assets" / "tokenizer" / "vocabulary.spm"
    import hashlib

    assert recorded == hashlib.sha256(vocabulary.read_bytes()).hexdigest()
    vocabulary.write_bytes(open(_another_vocabulary(tmp_path, 500), "rb").read())  # fewer pieces: fits the rows
    for name, loader in LOADERS.items():
        if name == "Backbone.from_preset":
            continue  # a backbone has no tokenizer
        with pytest.raises(CheckpointError, match=f"{re.escape(str(vocabulary))}: not the vocabulary this model"):
            loader(str(copy))


def test_non_finite_bfloat16_weights_are_found_too():
    import ml_dtypes

    from gtr_keras.models.model_files.model_directory import check_finite

    weights = np.ones((2, 3), ml_dtypes.bfloat16)
    check_finite({"w": weights}, "f.h5")
    weights[1, 2] = np.nan
    with pytest.raises(CheckpointError, match="f.h5: weight w holds 1 non-finite"):
        check_finite({"w": weights}, "f.h5")


def test_a_config_nested_deeper_than_python_can_parse_is_named(tmp_path):
    from gtr_keras.models.model_files.model_directory import read_json

    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match=r"config\.json: corrupt JSON \(maximum recursion depth exceeded"):
        read_json(str(tmp_path / "config.json"))
