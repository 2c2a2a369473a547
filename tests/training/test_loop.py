"""`gtr-keras train` end to end where the machine or the precision get in the way: a file-size limit at a
checkpoint is exit 2 naming the file (and a rerun resumes), a model trained in bfloat16 loads with every
command, and the run's tokenizer keeps what a tokenizer file cannot carry (lowercasing)."""

import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO
from training_inputs import SPIECE, write_triples

import gtr_keras
from gtr_keras.cli.main import main


def train_argv(tmp_path, *extra):
    return [
        "train",
        "--init",
        "gtr-tiny",
        "--tokenizer",
        SPIECE,
        "--data",
        write_triples(tmp_path / "t.jsonl"),
        "--output-dir",
        str(tmp_path / "run"),
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--checkpoint-every",
        "2",
        "--query-length",
        "8",
        "--document-length",
        "16",
        *extra,
    ]


@pytest.mark.large
@pytest.mark.slow
def test_a_file_size_limit_at_a_checkpoint_is_exit_2_naming_the_file_and_a_rerun_resumes(tmp_path):
    limited = (
        "import resource, sys\nresource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))\n"
        "from gtr_keras.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", limited, *train_argv(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2, result.stderr[-2000:]
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(f"gtr-keras train: error: {tmp_path / 'run' / 'checkpoints'}/ckpt-") and error.endswith(
        ": File too large"
    ), error
    assert main(train_argv(tmp_path)) == 0  # resumes; TensorFlow's half-written checkpoint is removed first
    assert not list((tmp_path / "run" / "checkpoints").glob("*_temp"))


@pytest.mark.large
@pytest.mark.slow
def test_a_model_trained_in_bfloat16_loads_with_every_command(tmp_path):
    assert main(train_argv(tmp_path, "--precision", "bfloat16")) == 0
    model = str(tmp_path / "run" / "model")
    (tmp_path / "q.txt").write_text("what about a cat\n")
    for precision in ("float32", "bfloat16"):
        out = tmp_path / f"q-{precision}.npy"
        assert (
            main(
                [
                    "encode",
                    "--model",
                    model,
                    "--input",
                    str(tmp_path / "q.txt"),
                    "--output",
                    str(out),
                    "--precision",
                    precision,
                ]
            )
            == 0
        )
    np.testing.assert_allclose(np.load(tmp_path / "q-float32.npy"), np.load(tmp_path / "q-bfloat16.npy"), atol=0.05)
    assert main(["export", "--model", model, "--out", str(tmp_path / "exports")]) == 0
    assert gtr_keras.load(model).model.dtype_policy.name == "float32"


def test_a_tokenizer_file_keeps_the_lowercasing_of_the_initial_model_directory(tiny_model_dir, tmp_path):
    from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import GTRTextEmbedderPreprocessor
    from gtr_keras.models.gtr.gtr_tokenizer import GTRTokenizer
    from gtr_keras.training.config import TrainConfig
    from gtr_keras.training.loop import _set_preprocessor

    config = TrainConfig.from_dict(
        {
            "init": tiny_model_dir,
            "tokenizer": SPIECE,
            "output_dir": str(tmp_path / "run"),
            "data": {"source": write_triples(tmp_path / "t.jsonl"), "query_length": 8, "document_length": 16},
        }
    )
    model = gtr_keras.load(tiny_model_dir).model
    for lowercase in (False, True):
        model.preprocessor = GTRTextEmbedderPreprocessor(GTRTokenizer(model.preprocessor.tokenizer.proto, lowercase))
        _set_preprocessor(config, model, None, None)
        assert model.preprocessor.tokenizer.lowercase is lowercase
        assert (model.preprocessor.sequence_length, model.preprocessor.query_length) == (16, 8)


@pytest.mark.large
@pytest.mark.slow
def test_training_with_matryoshka_dims_records_them_in_the_model(tmp_path, capsys):
    import json
    import warnings

    assert main(train_argv(tmp_path, "--matryoshka-dims", "16,32")) == 0
    model = str(tmp_path / "run" / "model")
    task = json.loads((tmp_path / "run" / "model" / "task.json").read_text())
    assert task["config"]["matryoshka_dims"] == [16, 32]
    encoder = gtr_keras.load(model)
    assert encoder.matryoshka_dims == (16, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # dimensions it was trained for: no warning
        assert encoder.encode_queries(["lift"], dimensions=16).shape == (1, 16)
    with pytest.warns(UserWarning, match="not trained for embeddings of 8 dimensions"):
        encoder.encode_queries(["lift"], dimensions=8)
    (tmp_path / "bad").mkdir()
    with pytest.raises(SystemExit):
        main(train_argv(tmp_path / "bad", "--matryoshka-dims", "16,x"))
    assert "argument --matryoshka-dims: must be an integer of at least 1, got 'x'" in capsys.readouterr().err
