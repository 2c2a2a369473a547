"""`resolve_model_source`: every kind of source becomes one `ModelSource` (path, format, remote) before any load."""

import os
import shutil

import pytest
import tensorflow as tf
from conftest import FIXTURES, TINY_ST

from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.presets import BUNDLED_MODEL_DIR, PRESET_SOURCES
from gtr_keras.models.model_files.model_source import (
    ARCHITECTURE,
    KERAS_HUB,
    SENTENCE_TRANSFORMERS,
    ModelSource,
    gtr_model_source,
    resolve_model_source,
)

PRESET = os.path.join(FIXTURES, "tiny-gtr-preset-0.1")


@pytest.mark.parametrize(
    "given, path, fmt",
    [
        ("gtr_small_distilled_en", BUNDLED_MODEL_DIR, KERAS_HUB),
        ("gtr_t5_base_en", "hf://sentence-transformers/gtr-t5-base", SENTENCE_TRANSFORMERS),
        ("gtr_t5_xxl_en", "hf://sentence-transformers/gtr-t5-xxl", SENTENCE_TRANSFORMERS),
        ("hf://someone/gtr-t5-tuned", "hf://someone/gtr-t5-tuned", SENTENCE_TRANSFORMERS),
        ("kaggle://org/gtr/keras/gtr_small", "kaggle://org/gtr/keras/gtr_small", KERAS_HUB),
        ("gtr-tiny", "gtr-tiny", ARCHITECTURE),
        ("gtr-base", "gtr-base", ARCHITECTURE),
        (TINY_ST, TINY_ST, SENTENCE_TRANSFORMERS),
        (PRESET, PRESET, KERAS_HUB),
        ("file://" + PRESET, PRESET, KERAS_HUB),
    ],
)
def test_each_kind_of_source_resolves_to_its_path_and_format(given, path, fmt):
    source = resolve_model_source(given)
    assert (source.name, source.path, source.format, source.remote) == (given, path, fmt, False)
    assert os.fspath(source) == path and str(source) == given
    assert resolve_model_source(source) is source


def test_every_name_of_the_table_resolves():
    for name, target in PRESET_SOURCES.items():
        assert resolve_model_source(name).path == target
        assert gtr_model_source(name) == resolve_model_source(name)


def test_a_remote_directory_is_resolved_in_place_and_copied_only_for_the_block(tmp_path):
    remote = "ram://model-source/preset"
    for directory, _, names in os.walk(PRESET):
        for file_name in names:
            relative = os.path.relpath(os.path.join(directory, file_name), PRESET)
            tf.io.gfile.makedirs(os.path.dirname(f"{remote}/{relative}"))
            tf.io.gfile.copy(os.path.join(directory, file_name), f"{remote}/{relative}", overwrite=True)
    source = resolve_model_source(remote + "/")
    assert (source.path, source.format, source.remote) == (remote, KERAS_HUB, True)
    with source.local() as local:
        assert files_in(local) == files_in(PRESET)
    assert not os.path.exists(local)
    with pytest.raises(CheckpointError, match=f"{remote}/config.json: broken"), source.local() as local:
        raise CheckpointError(f"{local}/config.json: broken")


def files_in(directory):
    return sorted(os.path.relpath(os.path.join(d, f), directory) for d, _, names in os.walk(directory) for f in names)


def test_a_missing_directory_and_a_directory_of_no_known_format_are_refused_with_one_line(tmp_path):
    with pytest.raises(CheckpointError, match="gtr-small-distiled: no such model directory"):
        resolve_model_source("gtr-small-distiled")
    (tmp_path / "t5").mkdir()
    (tmp_path / "t5" / "config.json").write_text('{"model_type": "t5"}')
    with pytest.raises(CheckpointError, match="t5/config.json: not a gtr-keras model directory"):
        resolve_model_source(tmp_path / "t5")
    (tmp_path / "t5" / "config.json").write_text("[1]")
    with pytest.raises(CheckpointError, match="t5/config.json: expected a JSON object, got list"):
        resolve_model_source(tmp_path / "t5")
    with pytest.raises(CheckpointError, match="empty/config.json: missing"):
        (tmp_path / "empty").mkdir()
        resolve_model_source(tmp_path / "empty")


def test_a_caller_that_expects_a_format_gets_it_without_detection(tmp_path):
    st = shutil.copytree(TINY_ST, tmp_path / "st")
    os.remove(st / "modules.json")
    assert resolve_model_source(st, SENTENCE_TRANSFORMERS).format == SENTENCE_TRANSFORMERS


def test_gtr_sources_are_told_from_other_models(tmp_path):
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert"}')
    (tmp_path / "bert" / "modules.json").write_text("[]")
    for source in (TINY_ST, PRESET, "hf://sentence-transformers/gtr-t5-base"):
        assert gtr_model_source(source) == resolve_model_source(source), source
    others = (
        tmp_path / "bert",
        tmp_path / "none",
        "all_minilm_l6_v2_en",
        "hf://sentence-transformers/all-MiniLM-L6-v2",
        "nope://x",
    )
    assert [gtr_model_source(s) for s in others] == [None] * len(others)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{")
    with pytest.raises(CheckpointError, match="broken/config.json: corrupt JSON"):
        gtr_model_source(tmp_path / "broken")


def test_a_model_source_is_a_value_whose_format_is_read_once_when_deferred(tmp_path):
    assert ModelSource("gtr-tiny", "gtr-tiny", ARCHITECTURE) == resolve_model_source("gtr-tiny")
    deferred = resolve_model_source(PRESET, read_format=False)
    assert deferred.format is None and resolve_model_source(deferred) == resolve_model_source(PRESET)
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointError, match="file: expected a model directory, got a file"):
        resolve_model_source(tmp_path / "file")
