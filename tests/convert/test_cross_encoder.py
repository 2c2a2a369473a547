"""Cross-encoder checkpoints that gtr-keras cannot read are refused in one line naming the file, before any
weight is read."""

import json
import shutil

import pytest
from reranker_inputs import CHECKPOINTS

from gtr_keras.cli.main import main


def broken_copy(tmp_path, family, change):
    source = tmp_path / f"{family}-checkpoint"
    shutil.copytree(CHECKPOINTS[family], source)
    change(source)
    return source


def edit_config(**settings):
    def change(source):
        config = json.loads((source / "config.json").read_text())
        (source / "config.json").write_text(json.dumps({**config, **settings}))

    return change


def truncate(name, size=100):
    def change(source):
        with open(source / name, "r+b") as f:
            f.truncate(size)

    return change


def remove(*names):
    def change(source):
        for name in names:
            (source / name).unlink()

    return change


@pytest.mark.parametrize(
    "family, change, message",
    [
        (
            "bert",
            edit_config(architectures=["DistilBertForSequenceClassification"]),
            "config.json: architecture 'DistilBertForSequenceClassification' is not supported; gtr-keras reads "
            "cross-encoders of BertForSequenceClassification and XLMRobertaForSequenceClassification",
        ),
        ("bert", edit_config(id2label={"0": "no", "1": "yes"}), "config.json: 2 labels; a reranker gives one"),
        ("bert", edit_config(hidden_act="relu"), "config.json: hidden_act 'relu' is not supported"),
        ("xlmr", edit_config(layer_norm_eps=1e-12), "config.json: layer_norm_eps 1e-12 is not supported"),
        (
            "bert",
            edit_config(sentence_transformers={"activation_fn": "torch.nn.modules.activation.Softmax"}),
            "config.json: activation 'torch.nn.modules.activation.Softmax' is not supported",
        ),
        (
            "bert",
            remove("tokenizer.json", "vocab.txt"),
            "vocab.txt: missing (a BERT cross-encoder needs tokenizer.json",
        ),
        ("xlmr", remove("sentencepiece.bpe.model"), "sentencepiece.bpe.model: missing (an XLM-RoBERTa cross-encoder"),
        ("xlmr", remove("model.safetensors"), "model.safetensors: missing"),
        *[
            (family, truncate("model.safetensors"), "model.safetensors: corrupt or unreadable safetensors file")
            for family in ("bert", "xlmr")
        ],
        ("bert", truncate("model.safetensors", 20_000), "model.safetensors: corrupt or unreadable safetensors"),
    ],
)
def test_a_checkpoint_gtr_keras_cannot_read_is_exit_2_naming_the_file(tmp_path, capsys, family, change, message):
    source = broken_copy(tmp_path, family, change)
    out = tmp_path / "out"
    assert main(["convert", str(source), str(out)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{source}/{message}" in error, error
    assert not out.exists()


def test_a_named_identity_activation_gives_the_logits(tmp_path):
    import numpy as np
    from reranker_inputs import PAIRS, REFERENCE

    import gtr_keras

    identity = edit_config(sentence_transformers={"activation_fn": "torch.nn.modules.linear.Identity"})
    scores = gtr_keras.load(str(broken_copy(tmp_path, "bert", identity))).predict(PAIRS[:4])
    np.testing.assert_allclose(scores, REFERENCE["bert"]["logits"][:4], atol=1e-4)


def test_the_vocabulary_files_of_a_checkpoint_without_tokenizer_json_give_the_same_tokens(tmp_path):
    from reranker_inputs import PAIRS, REFERENCE

    import gtr_keras

    scorer = gtr_keras.load(str(broken_copy(tmp_path, "bert", remove("tokenizer.json"))))
    assert [ids for ids, _ in scorer.tokenize(PAIRS)] == REFERENCE["bert"]["token_ids"]
