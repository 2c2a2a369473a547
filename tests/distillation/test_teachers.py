"""Teachers: GTR model directories and keras-hub TextEmbedder presets, encoded without PyTorch."""

import numpy as np
import pytest
from training_inputs import TEXTS, write_bert_text_embedder

from gtr_keras.distillation.teachers import load_teacher
from gtr_keras.errors import CheckpointError


@pytest.fixture(scope="module")
def bert_preset(tmp_path_factory):
    path = tmp_path_factory.mktemp("teachers") / "bert"
    return path, write_bert_text_embedder(path)


def test_a_keras_hub_text_embedder_encodes_as_keras_hub_does(bert_preset):
    path, expected = bert_preset
    teacher = load_teacher(path)
    assert teacher.embedding_dim == 8 and not teacher.is_gtr
    # Batches of 2 sorted by length, each padded to its longest text rather than to 32 tokens.
    np.testing.assert_allclose(teacher.encode(TEXTS, batch_size=2), expected, atol=1e-6)
    np.testing.assert_allclose(teacher.encode_queries(TEXTS[:1]), expected[:1], atol=1e-6)


def test_gtr_models_build_after_a_keras_hub_teacher(bert_preset):
    from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder

    teacher = load_teacher(bert_preset[0])
    student = GTRTextEmbedder.from_architecture("gtr-tiny", num_layers=1)  # failed in Functional.__init__
    assert student.embedding_dim == 64
    np.testing.assert_allclose(teacher.encode(TEXTS), bert_preset[1], atol=1e-6)


def test_the_fingerprint_follows_the_weights(bert_preset, tmp_path):
    import shutil

    path = bert_preset[0]
    assert load_teacher(path).fingerprint() == load_teacher(path).fingerprint()
    other = tmp_path / "other"
    write_bert_text_embedder(other)  # new random weights
    assert load_teacher(other).fingerprint() != load_teacher(path).fingerprint()
    moved = tmp_path / "moved"
    shutil.copytree(path, moved)
    assert load_teacher(moved).fingerprint() == load_teacher(path).fingerprint()


def test_a_gtr_teacher_encodes_queries_and_documents_with_their_budgets(tiny_model_dir, tiny_encoder):
    teacher = load_teacher(tiny_model_dir)
    assert teacher.is_gtr and teacher.embedding_dim == tiny_encoder.model.embedding_dim
    np.testing.assert_allclose(teacher.encode_queries(TEXTS), tiny_encoder.encode_queries(TEXTS), atol=1e-6)
    np.testing.assert_allclose(teacher.encode_documents(TEXTS), tiny_encoder.encode_documents(TEXTS), atol=1e-6)


@pytest.mark.parametrize("kind", ["missing", "empty", "not-json"])
def test_no_teacher_there_is_one_line(tmp_path, kind):
    path = tmp_path / "teacher"
    if kind != "missing":
        path.mkdir()
    if kind == "not-json":
        (path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError) as error:
        load_teacher(path)
    message = str(error.value)
    assert message.startswith(str(path)) and "\n" not in message


def test_a_truncated_safetensors_file_of_a_teacher_is_one_line_naming_it(tmp_path):
    import shutil

    from reranker_inputs import CHECKPOINTS

    teacher = shutil.copytree(CHECKPOINTS["bert"], tmp_path / "teacher")  # a BERT checkpoint keras-hub loads
    assert load_teacher(teacher).embedding_dim > 0
    with open(teacher / "model.safetensors", "r+b") as f:
        f.truncate(100)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: corrupt or unreadable safetensors file") as error:
        load_teacher(teacher)
    assert str(error.value).startswith(str(teacher / "model.safetensors")) and "\n" not in str(error.value)
