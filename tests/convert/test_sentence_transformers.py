import json
import os
import shutil
import sys
from pathlib import Path

import keras_hub
import numpy as np
import pytest
from conftest import FIXTURES, TINY_ST

import gtr_keras
from gtr_keras.cli.main import main
from gtr_keras.errors import CheckpointError
from gtr_keras.saving import convert_sentence_transformers, load_model, save


def _texts():
    with open(os.path.join(FIXTURES, "tiny-gtr-texts.json"), encoding="utf-8") as f:
        return json.load(f)


def test_convert_then_encode_matches_sentence_transformers(tmp_path, tiny_model_dir):
    texts = _texts()
    assert len(texts) >= 20 and "" in texts and any(len(t.split()) > 512 for t in texts)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))
    out = tmp_path / "emb.npy"
    assert main(["encode", "--model", tiny_model_dir, "--input", str(corpus), "--output", str(out)]) == 0
    reference = np.load(os.path.join(FIXTURES, "tiny-gtr-reference.npz"))["embeddings"]
    np.testing.assert_allclose(np.load(out), reference, atol=1e-5, rtol=0)


@pytest.mark.parametrize("feedforward, heads", [("relu", {}), ("gated-gelu", {}), ("relu", {"d_kv": 32})])
def test_fresh_random_checkpoint_matches_reference_up_to_512_tokens(tmp_path, feedforward, heads):
    """Base/Large shapes (heads x d_kv = d_model), T5 v1.1's FFN, and XL/XXL's heads x d_kv != d_model."""
    pytest.importorskip("torch")
    pytest.importorskip("sentence_transformers")
    import reference_checkpoint

    st_dir = reference_checkpoint.build_checkpoint(
        str(tmp_path / "st"),
        seed=7,
        feed_forward_proj=feedforward,
        spiece_path=os.path.join(TINY_ST, "spiece.model"),
        t5_config={**reference_checkpoint.TINY_T5, **heads},
    )
    words = reference_checkpoint.cranfield_texts()[3].split()
    texts = [" ".join((words * 20)[:n]) for n in (1, 15, 17, 40, 130, 140, 300, 511, 700)]
    embedder = convert_sentence_transformers(st_dir)
    assert max(len(ids) for ids in embedder.batch_encoder().tokenize(texts)) == 512
    expected = reference_checkpoint.reference_embeddings(st_dir, texts)
    np.testing.assert_allclose(embedder.encode_documents(texts, batch_size=4), expected, atol=1e-5, rtol=0)
    save(embedder, tmp_path / "preset")
    reloaded = keras_hub.models.TextEmbedder.from_preset(str(tmp_path / "preset"))
    np.testing.assert_allclose(reloaded.encode_documents(texts, batch_size=4), expected, atol=1e-5, rtol=0)


def test_save_load_round_trip_gives_identical_embeddings(tmp_path, tiny_encoder):
    texts = ["wing lift", "", "boundary layer " * 40]
    save(tiny_encoder, tmp_path / "copy")
    again = gtr_keras.load(str(tmp_path / "copy"))
    np.testing.assert_array_equal(again.encode_documents(texts), tiny_encoder.encode_documents(texts))
    np.testing.assert_array_equal(again.encode_queries(texts), tiny_encoder.encode_queries(texts))
    assert (again.query_length, again.document_length) == (64, 512)
    assert sorted(os.listdir(tmp_path)) == ["copy"]  # no staging directory left behind
    shorter = gtr_keras.load(str(tmp_path / "copy"), query_length=16, document_length=32)
    assert (shorter.query_length, shorter.document_length) == (16, 32)
    assert len(shorter.tokenize(texts[2:], "document")[0]) == 32


def _copy_st(tmp_path):
    return shutil.copytree(TINY_ST, tmp_path / "st")


@pytest.mark.parametrize("name", ["model.safetensors", "spiece.model", "modules.json", "config.json"])
def test_missing_file_is_named(tmp_path, name):
    st = _copy_st(tmp_path)
    os.remove(st / name)
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        convert_sentence_transformers(str(st))


@pytest.mark.parametrize("name", ["model.safetensors", "2_Dense/model.safetensors", "spiece.model", "config.json"])
def test_corrupt_file_is_named(tmp_path, name):
    st = _copy_st(tmp_path)
    (st / name).write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        convert_sentence_transformers(str(st))


def test_shape_mismatch_names_tensor_and_both_shapes(tmp_path):
    st = _copy_st(tmp_path)
    config = json.loads((st / "config.json").read_text())
    config["d_ff"] = 96
    (st / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"encoder\.block\.0\.layer\.1\.DenseReluDense\.wi\.weight.*\(128, 64\).*\(96, 64\)"
    ):
        convert_sentence_transformers(str(st))


def test_unknown_architecture(tmp_path):
    st = _copy_st(tmp_path)
    config = json.loads((st / "config.json").read_text())
    config.update(model_type="bert", architectures=["BertModel"])
    (st / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="unknown architecture.*BertModel"):
        convert_sentence_transformers(str(st))


def test_pytorch_bin_without_torch_says_to_use_safetensors(tmp_path, monkeypatch):
    st = _copy_st(tmp_path)
    os.remove(st / "model.safetensors")
    (st / "pytorch_model.bin").write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(CheckpointError, match="pytorch_model.bin needs PyTorch.*safetensors"):
        convert_sentence_transformers(str(st))


def test_pytorch_bin_is_read_when_torch_is_installed(tmp_path, tiny_encoder):
    torch = pytest.importorskip("torch")
    from safetensors.numpy import load_file

    st = _copy_st(tmp_path)
    state = {k: torch.from_numpy(v) for k, v in load_file(str(st / "model.safetensors")).items()}
    torch.save(state, st / "pytorch_model.bin")
    os.remove(st / "model.safetensors")
    texts = ["wing lift"]
    np.testing.assert_allclose(
        convert_sentence_transformers(str(st)).encode_documents(texts), tiny_encoder.encode_documents(texts), atol=1e-6
    )


def test_hub_id_offline_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match=r"(?s)could not download .sentence-transformers/gtr-t5-base.*offline"):
        convert_sentence_transformers("sentence-transformers/gtr-t5-base", cache_dir=str(tmp_path))


@pytest.mark.parametrize("to", [[], ["--to", "sentence-transformers"]])
def test_a_published_name_offline_says_the_checkpoint_must_be_downloaded_and_how(monkeypatch, tmp_path, capsys, to):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def offline(repo_id, **kwargs):
        raise LocalEntryNotFoundError("outgoing traffic has been disabled")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    assert main(["convert", *to, "gtr_t5_base_en", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such" not in err, err
    assert "could not download 'sentence-transformers/gtr-t5-base'" in err and "must be downloaded" in err, err
    assert "`hf download sentence-transformers/gtr-t5-base --local-dir DIR`" in err, err
    assert not (tmp_path / "out").exists()


def test_not_a_model_directory(tmp_path):
    with pytest.raises(CheckpointError, match="config.json: missing"):
        load_model(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["T5EncoderModel"]}))
    with pytest.raises(CheckpointError, match="gtr-keras convert"):
        load_model(str(tmp_path))


@pytest.mark.parametrize(
    "name, size", [("model.safetensors", 100), ("model.safetensors", 300_000), ("2_Dense/model.safetensors", 100)]
)
def test_a_truncated_safetensors_file_is_exit_2_naming_it_and_nothing_is_written(tmp_path, capsys, name, size):
    st = _copy_st(tmp_path)
    with open(st / name, "r+b") as f:
        f.truncate(size)
    out = tmp_path / "out"
    assert main(["convert", str(st), str(out)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{st / name}: corrupt or unreadable safetensors file" in error, error
    assert not out.exists()


def test_cli_reports_checkpoint_errors_with_exit_2(tmp_path, capsys):
    assert main(["convert", str(tmp_path / "nowhere"), str(tmp_path / "out")]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_to_sentence_transformers_round_trips_the_published_layout(tmp_path, tiny_model_dir):
    from safetensors.numpy import load_file

    out = tmp_path / "st"
    assert main(["convert", "--to", "sentence-transformers", tiny_model_dir, str(out)]) == 0
    for weights in ("model.safetensors", "2_Dense/model.safetensors"):
        written, published = load_file(out / weights), load_file(os.path.join(TINY_ST, weights))
        assert written.keys() == published.keys(), weights
        for name in published:
            np.testing.assert_array_equal(written[name], published[name], err_msg=name)
    config, published = (json.loads((path / "config.json").read_text()) for path in (out, Path(TINY_ST)))
    for key in (
        "model_type",
        "d_model",
        "d_kv",
        "d_ff",
        "num_layers",
        "num_heads",
        "vocab_size",
        "feed_forward_proj",
        "relative_attention_num_buckets",
        "relative_attention_max_distance",
    ):
        assert config[key] == published[key], key
    assert (out / "spiece.model").read_bytes() == Path(TINY_ST, "spiece.model").read_bytes()
    assert json.loads((out / "sentence_bert_config.json").read_text()) == {
        "max_seq_length": 512,
        "do_lower_case": False,
    }
    back = tmp_path / "back"
    assert main(["convert", str(out), str(back)]) == 0
    texts = _texts()
    np.testing.assert_array_equal(
        load_model(str(back)).encode_documents(texts), load_model(tiny_model_dir).encode_documents(texts)
    )


def test_to_sentence_transformers_loads_in_sentence_transformers(tmp_path, tiny_model_dir):
    pytest.importorskip("torch")
    sentence_transformers = pytest.importorskip("sentence_transformers")
    out = tmp_path / "st"
    gtr_keras.save(load_model(tiny_model_dir), out, format="sentence-transformers")
    texts = _texts()
    reference = sentence_transformers.SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_allclose(reference, load_model(tiny_model_dir).encode_documents(texts), atol=1e-5, rtol=0)


def test_to_sentence_transformers_refuses_what_is_no_model(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["convert", "--to", "sentence-transformers", str(tmp_path / "empty"), str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == f"gtr-keras convert: error: {tmp_path / 'empty' / 'config.json'}: missing"
    assert not (tmp_path / "out").exists()
    with pytest.raises(gtr_keras.UserError, match="format must be"):
        gtr_keras.save(load_model(os.path.join(FIXTURES, "tiny-gtr-preset-0.1")), tmp_path / "x", format="onnx")
