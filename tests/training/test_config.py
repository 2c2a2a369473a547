"""`train` checks its inputs before any expensive work, and says what is wrong in one line."""

import re

import pytest
from training_inputs import SPIECE, write_triples

from gtr_keras.errors import CheckpointError, DataError, UserError
from gtr_keras.training.config import TrainConfig, load_config, make_strategy
from gtr_keras.training.data import TrainingData
from gtr_keras.training.loop import train


def test_make_strategy_refuses_an_unknown_name():
    with pytest.raises(UserError, match=r"^strategy must be one of \('default', .*\), got 'gpu'$"):
        make_strategy("gpu")


def preset_run(tmp_path, source, **settings):
    """A gtr-tiny run that would train its own SentencePiece model on `source`."""
    return {
        "init": "gtr-tiny",
        "output_dir": str(tmp_path / "run"),
        "steps": 1,
        "batch_size": 4,
        "verbose": 0,
        "data": {"source": str(source), "query_length": 8, "document_length": 16},
        **settings,
    }


def test_bad_settings_name_the_source_and_key():
    values = {"init": "gtr-tiny", "output_dir": "o", "data.source": "t.jsonl"}
    for key, value, message in [
        ("steps", "10", "steps must be an integer of at least 1, got '10'"),
        ("batch_size", 0, "batch_size must be an integer of at least 1, got 0"),
        ("learning_rate", "1e-3", "learning_rate must be a number, got '1e-3'"),
        ("grad_cache_chunk_size", 0, "grad_cache_chunk_size must be an integer of at least 1, got 0"),
        ("data.query_length", 1, "data.query_length must be at least 2 (one token and EOS), got 1"),
    ]:
        with pytest.raises(UserError, match=f"^training settings: {re.escape(message)}$"):
            load_config(None, {**values, key: value})
    with pytest.raises(UserError, match="^train.yaml: unknown setting"):
        TrainConfig.from_dict(
            {"init": "gtr-tiny", "output_dir": "o", "data": {"source": "t"}, "stepz": 1}, "train.yaml"
        )


def test_init_neither_a_directory_nor_a_preset(tmp_path):
    config = preset_run(tmp_path, write_triples(tmp_path / "t.jsonl"), init="./no-such-dir")
    with pytest.raises(
        CheckpointError,
        match=re.escape(
            "./no-such-dir: no such model directory and not a preset name (gtr-base, gtr-large, gtr-xl, gtr-xxl, "
            "gtr-small, gtr-tiny)"
        ),
    ):
        train(config)
    with pytest.raises(CheckpointError, match=re.escape(f"{tmp_path}/none.model: no such SentencePiece model file")):
        train({**config, "init": "gtr-tiny", "tokenizer": str(tmp_path / "none.model")})
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "name, lines, message",
    [
        ("missing.jsonl", None, "{path}: no such file or directory"),
        ("empty.jsonl", [], "{path}: no training examples (empty, or every example has an empty query or positive)"),
        ("bad.jsonl", ['{"query": "q", "positive": "p"}', '{"query": "q"}'], "{path}:2: missing field `positive`"),
    ],
)
def test_bad_data_fails_before_anything_is_trained_or_written(tmp_path, name, lines, message):
    path = tmp_path / name
    if lines is not None:
        path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(DataError, match=f"^{re.escape(message.format(path=path))}$"):
        train(preset_run(tmp_path, path))
    assert not (tmp_path / "run").exists()


def test_a_data_error_in_the_pipeline_is_raised_as_itself(tmp_path, monkeypatch):
    """Data that goes bad after the first read surfaces as its `DataError`, not as TensorFlow's wrapping."""
    path = write_triples(tmp_path / "t.jsonl", count=8)
    with open(path, "a") as f:
        f.write('{"query": "q"}\n')
    monkeypatch.setattr(TrainingData, "check", lambda self: 9)
    config = preset_run(tmp_path, path, tokenizer=SPIECE, steps=4, model={"num_layers": 1})
    with pytest.raises(DataError, match=f"^{re.escape(path)}:9: missing field `positive`$"):
        train(config)


def test_yaml_config_reads_exponent_floats_as_numbers(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("init: gtr-tiny\noutput_dir: o\nlearning_rate: 1e-3\ntemperature: 2E-2\ndata:\n  source: t.jsonl\n")
    config = load_config(str(path))
    assert (config.learning_rate, config.temperature) == (0.001, 0.02)
