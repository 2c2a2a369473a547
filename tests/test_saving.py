"""`gtr_keras.load`/`save` and model names: presets written before the package was re-laid still load,
and the bundled model answers to its name everywhere a model directory does."""

import json
import os
import re

import keras_hub
import numpy as np
import pytest
from conftest import FIXTURES

import gtr_keras
from gtr_keras.cli.main import main
from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.presets import BUNDLED_MODEL_DIR, preset_config
from gtr_keras.models.model_files.fingerprint import fingerprint
from gtr_keras.models.model_files.model_source import resolve_model_source

OLD_PRESET = os.path.join(FIXTURES, "tiny-gtr-preset-0.1")


def reference():
    with open(os.path.join(FIXTURES, "tiny-gtr-texts.json"), encoding="utf-8") as f:
        texts = json.load(f)
    return texts, np.load(os.path.join(FIXTURES, "tiny-gtr-reference.npz"))["embeddings"]


def test_a_preset_written_before_the_relayout_names_the_old_modules_and_still_loads():
    with open(os.path.join(OLD_PRESET, "task.json"), encoding="utf-8") as f:
        task = json.load(f)
    assert task["module"] == "gtr_keras.text_embedder" and task["registered_name"] == "gtr_keras>GTRTextEmbedder"
    texts, expected = reference()
    embedder = keras_hub.models.TextEmbedder.from_preset(OLD_PRESET)
    assert type(embedder) is gtr_keras.GTRTextEmbedder
    np.testing.assert_allclose(embedder.encode_documents(texts), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(gtr_keras.load(OLD_PRESET).encode_documents(texts), expected, atol=1e-5, rtol=0)
    assert type(keras_hub.models.Backbone.from_preset(OLD_PRESET)) is gtr_keras.GTRBackbone
    # The fingerprint recorded by indexes and runs made before the re-layout (same weights, same order).
    assert fingerprint(embedder) == "a0b6f2023edb2bac3286337b7a9e310ae9cf4fb49ad6e97a50c93662d85f9e66"
    # Lowercasing changes every token of a capitalised text, so it changes the fingerprint.
    tokenizer = gtr_keras.GTRTokenizer(embedder.preprocessor.tokenizer.proto, lowercase=True)
    embedder.preprocessor = gtr_keras.GTRTextEmbedderPreprocessor(tokenizer)
    assert fingerprint(embedder) != "a0b6f2023edb2bac3286337b7a9e310ae9cf4fb49ad6e97a50c93662d85f9e66"


def test_the_bundled_model_loads_by_name():
    name = "gtr_small_distilled_en"
    resolve_model_source(name)
    by_name = gtr_keras.load(name).encode_queries(["lift on a wing"])
    by_path = gtr_keras.load(BUNDLED_MODEL_DIR).encode_queries(["lift on a wing"])
    np.testing.assert_array_equal(by_name, by_path)
    assert type(gtr_keras.GTRTextEmbedder.from_preset(name)) is gtr_keras.GTRTextEmbedder


def test_the_bundled_name_works_as_a_command_line_model(tmp_path):
    (tmp_path / "q.txt").write_text("lift on a wing\n")
    out = tmp_path / "q.npy"
    assert (
        main(["encode", "--model", "gtr_small_distilled_en", "--input", str(tmp_path / "q.txt"), "--output", str(out)])
        == 0
    )
    assert np.load(out).shape == (1, 768)


MODEL_NAMES = "gtr_t5_base_en, gtr_t5_large_en, gtr_t5_xl_en, gtr_t5_xxl_en, gtr_small_distilled_en"


@pytest.mark.parametrize(
    "name, what",
    [
        ("gtr-small-distiled", "no such model directory"),
        ("gtr-small-distilled", "no such model directory"),  # the bundled model's old name
        ("gtr-base", "an architecture without weights (`GTRTextEmbedder.from_architecture`), no model directory"),
    ],
)
def test_an_unknown_or_old_name_is_refused_in_one_line_naming_the_model_names(name, what, tmp_path, capsys):
    with pytest.raises(CheckpointError, match=f"^{re.escape(f'{name}: {what} nor a model name ({MODEL_NAMES})')}$"):
        gtr_keras.load(name)
    (tmp_path / "q.txt").write_text("lift on a wing\n")
    argv = ["encode", "--model", name, "--input", str(tmp_path / "q.txt"), "--output", str(tmp_path / "q.npy")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{name}: {what} nor a model name ({MODEL_NAMES})" in err


@pytest.mark.parametrize("loader", ["gtr_keras.load", "TextEmbedder.from_preset", "Backbone.from_preset"])
def test_a_model_of_a_mixed_policy_saves_as_a_preset_every_loader_reads(tmp_path, loader):
    config = {k: v for k, v in preset_config("gtr-tiny").items() if k != "embedding_dim"}
    with open(os.path.join(FIXTURES, "tiny-gtr-st", "spiece.model"), "rb") as f:
        embedder = gtr_keras.GTRTextEmbedder.from_parts(config, f.read(), 32, 16, 64, dtype="mixed_bfloat16")
    gtr_keras.save(embedder, tmp_path / "m")
    load = {
        "gtr_keras.load": lambda path: gtr_keras.load(path).model,
        "TextEmbedder.from_preset": keras_hub.models.TextEmbedder.from_preset,
        "Backbone.from_preset": keras_hub.models.Backbone.from_preset,
    }[loader]
    loaded = load(str(tmp_path / "m"))
    assert loaded.dtype_policy.name == "float32"  # the weights' dtype: float32 under mixed_bfloat16
    for saved, read in zip(
        getattr(embedder, "backbone" if "Backbone" in loader else "model", embedder).weights, loaded.weights
    ):
        np.testing.assert_array_equal(saved.numpy(), read.numpy())
    assert gtr_keras.load(str(tmp_path / "m"), dtype="bfloat16").model.dtype_policy.name == "bfloat16"


KILLED_SAVE = """
import sys, time
import keras_hub
import gtr_keras

embedder = gtr_keras.load(sys.argv[1]).model
embedder.projection.kernel.assign(embedder.projection.kernel * 2.0)  # another model
save_weights = keras_hub.models.Task.save_task_weights

def pausing(self, filepath):
    save_weights(self, filepath)
    print("half-written", flush=True)  # the backbone and task weights of the new model are written
    time.sleep(600)

keras_hub.models.Task.save_task_weights = pausing
embedder.save_to_preset(sys.argv[2])
"""


@pytest.mark.large
@pytest.mark.slow
def test_save_to_preset_killed_midway_leaves_the_previous_model_whole(tmp_path, tiny_model_dir):
    import selectors
    import shutil
    import signal
    import subprocess
    import sys

    from conftest import REPO

    target = shutil.copytree(tiny_model_dir, tmp_path / "m")
    before = gtr_keras.load(str(target)).encode_documents(["lift on a wing", "boundary layer"])
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_SAVE, tiny_model_dir, str(target)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    assert selector.select(timeout=300) and process.stdout.readline() == "half-written\n"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    after = gtr_keras.load(str(target)).encode_documents(["lift on a wing", "boundary layer"])
    np.testing.assert_array_equal(before, after)
    gtr_keras.save(gtr_keras.load(str(target)), target)  # the next writer removes the killed one's staging
    assert not list(tmp_path.glob(".m.tmp-*"))


def test_a_quantized_model_is_refused_at_save_with_one_line(tmp_path):
    embedder = gtr_keras.load(OLD_PRESET).model
    embedder.backbone.quantize("int8")
    with pytest.raises(
        CheckpointError,
        match=r"a quantized model \(int8_from_float32\) is not saved as a model "
        "directory",
    ):
        gtr_keras.save(embedder, tmp_path / "m")
    assert not (tmp_path / "m").exists()
