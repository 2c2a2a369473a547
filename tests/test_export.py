import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from gtr_keras.cli import main
from gtr_keras.export import load_export

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUESTS = os.path.join(REPO, "export", "serving", "requests")
TEXTS = ["what is the lift of a wing?", "", "boundary layer " * 400, "Ünïcödé 北京"]
QUERIES = ["wing lift", "heat transfer at hypersonic speed", "buckling of thin cylinders"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory, tiny_model_dir):
    """Encoder + searcher exports over a 300-document slice of the bundled Cranfield corpus."""
    from gtr_keras.corpus import load_corpus

    root = tmp_path_factory.mktemp("exports")
    corpus = load_corpus(os.path.join(REPO, "gtr_keras", "assets", "cranfield"))
    with open(root / "corpus.jsonl", "w") as f:
        for doc_id, title, text in list(zip(corpus.ids, corpus.titles, corpus.texts))[:300]:
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    out = {}
    for searcher, index_flags in (("scann", []), ("brute-force", ["--exact"])):
        index_dir = root / f"index-{searcher}"
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("gtr_keras.index.EXACT_MAX_N", 10)  # ScaNN even for 300 documents
            assert main(["index", "--model", tiny_model_dir, "--corpus", str(root / "corpus.jsonl"),
                         "--out", str(index_dir), *index_flags]) == 0
        assert main(["export", "--model", tiny_model_dir, "--index", str(index_dir), "--searcher", searcher,
                     "--out", str(root / searcher), "-k", "5"]) == 0
        out[searcher] = (root / searcher, index_dir)
    return out


def test_hub_load_tfsmlayer_and_keraslayer_in_fresh_process_match_cli_encode(exports, tiny_model_dir, tmp_path):
    encoder_dir = exports["scann"][0] / "encoder" / "1"
    texts_file = tmp_path / "texts.txt"
    texts_file.write_text("\n".join(TEXTS) + "\n")
    expected = {}
    for kind in ("query", "document"):
        out = tmp_path / f"{kind}.npy"
        assert main(["encode", "--model", tiny_model_dir, "--input", str(texts_file), "--output", str(out),
                     "--kind", kind]) == 0
        expected[kind] = np.load(out)
    script = f"""
import json, sys, numpy as np, tensorflow as tf, tensorflow_text, tensorflow_hub as hub, keras
texts = tf.constant(json.loads(sys.argv[1]))
hub_model = hub.load({str(encoder_dir)!r})
np.save({str(tmp_path / 'hub_q.npy')!r}, hub_model.signatures["encode_queries"](texts=texts)["embeddings"].numpy())
np.save({str(tmp_path / 'hub_d.npy')!r}, hub_model.signatures["serving_default"](texts=texts)["embeddings"].numpy())
inputs = keras.Input(shape=(), dtype="string")
layer = keras.layers.TFSMLayer({str(encoder_dir)!r}, call_endpoint="encode_queries")
model = keras.Model(inputs, layer(inputs))
np.save({str(tmp_path / 'tfsm_q.npy')!r}, model(texts)["embeddings"].numpy())
import tf_keras
hub_layer = hub.KerasLayer({str(encoder_dir)!r}, signature="encode_queries", output_key="embeddings")
strings = tf_keras.Input(shape=(), dtype=tf.string)
np.save({str(tmp_path / 'keraslayer_q.npy')!r}, tf_keras.Model(strings, hub_layer(strings))(texts).numpy())
"""
    result = subprocess.run([sys.executable, "-c", script, json.dumps(TEXTS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "hub_q.npy"), expected["query"], atol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "hub_d.npy"), expected["document"], atol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "tfsm_q.npy"), expected["query"], atol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "keraslayer_q.npy"), expected["query"], atol=1e-5)


def test_encoder_export_keeps_trainable_variables_and_the_spiece_asset(exports):
    encoder_dir = exports["scann"][0] / "encoder" / "1"
    loaded = load_export(str(encoder_dir))
    assert len(loaded.trainable_variables) == 28  # 3 blocks x 8 + embedding + bias + final norm + projection
    assert os.path.exists(encoder_dir / "assets" / "spiece.model")


@pytest.mark.parametrize("searcher", ["scann", "brute-force"])
def test_searcher_returns_the_same_ids_as_the_search_command(exports, tiny_model_dir, capsys, searcher):
    export_dir, index_dir = exports[searcher]
    capsys.readouterr()
    assert main(["search", "--index", str(index_dir), "--model", tiny_model_dir, *QUERIES, "-k", "5", "--json"]) == 0
    expected = [[hit["id"] for hit in row["hits"]] for row in json.loads(capsys.readouterr().out)]
    loaded = load_export(str(export_dir / "searcher" / "1"))
    result = loaded.signatures["serving_default"](queries=tf.constant(QUERIES))
    assert [[i.decode() for i in row] for row in result["ids"].numpy()] == expected
    with_k = loaded.signatures["search"](queries=tf.constant(QUERIES), k=tf.constant(3))
    assert [[i.decode() for i in row] for row in with_k["ids"].numpy()] == [row[:3] for row in expected]
    assert with_k["scores"].dtype == tf.float32 and with_k["ids"].shape == (3, 3)


def _tf_text_ops():
    import tensorflow_text

    names = set()
    for library in glob.glob(os.path.join(os.path.dirname(tensorflow_text.__file__), "python", "ops", "_*.so")):
        module = tf.load_op_library(library)
        # Generated op modules expose each op under its CamelCase op name.
        names.update(n for n in dir(module) if n[0].isupper() and callable(getattr(module, n)) and n != "Annotated")
    return names


def _ops_in_saved_model(path):
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    graph = proto.meta_graphs[0].graph_def
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops.update(node.op for node in function.node_def)
    return ops


def test_encoder_and_brute_force_searcher_use_only_stock_serving_ops(exports):
    allowed = (set(dir(tf.raw_ops)) | _tf_text_ops()) - {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
    export_dir = exports["brute-force"][0]
    for model in ("encoder", "searcher"):
        ops = _ops_in_saved_model(export_dir / model / "1")
        assert "SentencepieceTokenizeOp" in ops  # the walk does see the graph's ops
        assert ops <= allowed, ops - allowed
    scann_ops = _ops_in_saved_model(exports["scann"][0] / "searcher" / "1") - allowed
    assert scann_ops and all(op.startswith("Scann") for op in scann_ops), scann_ops


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "gtr_keras.cli", "saved-model-cli", *args],
                          check=True, capture_output=True, text=True).stdout


def test_saved_model_cli_show_and_run(exports):
    encoder_dir = str(exports["brute-force"][0] / "encoder" / "1")
    shown = _cli("show", "--dir", encoder_dir, "--all")
    for signature in ("serving_default", "encode_queries", "encode_documents"):
        assert f"signature_def['{signature}']" in shown
    assert "DT_STRING" in shown and "outputs['embeddings']" in shown
    ran = _cli("run", "--dir", encoder_dir, "--tag_set", "serve", "--signature_def", "encode_queries",
               "--input_exprs", 'texts=["wing lift", ""]')
    assert "Result for output key embeddings" in ran
    searcher_dir = str(exports["scann"][0] / "searcher" / "1")
    ran = _cli("run", "--dir", searcher_dir, "--tag_set", "serve", "--signature_def", "search",
               "--input_exprs", 'queries=["wing lift"];k=3')
    assert "Result for output key ids" in ran and ran.count("b'") == 3


@pytest.mark.parametrize(
    "request_file, model",
    [("encoder_rest.json", "encoder"), ("searcher_rest.json", "searcher"), ("searcher_k_rest.json", "searcher")],
)
def test_documented_rest_requests_fit_the_signatures(exports, request_file, model):
    with open(os.path.join(REQUESTS, request_file)) as f:
        request = json.load(f)
    loaded = load_export(str(exports["brute-force"][0] / model / "1"))
    signature = loaded.signatures[request["signature_name"]]
    specs = signature.structured_input_signature[1]
    if "instances" in request:  # row format: one input, one instance per row
        assert len(specs) == 1
        (name, spec), = specs.items()
        inputs = {name: tf.constant(request["instances"])}
    else:  # columnar format
        assert set(request["inputs"]) == set(specs)
        inputs = {name: tf.constant(value, dtype=specs[name].dtype) for name, value in request["inputs"].items()}
    for name, value in inputs.items():
        assert value.dtype == specs[name].dtype and specs[name].shape.is_compatible_with(value.shape)
    outputs = signature(**inputs)
    assert outputs


def test_bad_inputs_have_defined_results(exports):
    loaded = load_export(str(exports["brute-force"][0] / "encoder" / "1"))
    encode = loaded.signatures["encode_documents"]
    texts = tf.constant([b"", b"x " * 5000, b"bad \xff\xfe bytes", b"nul \x00 byte"])
    embeddings = encode(texts=texts)["embeddings"].numpy()
    assert embeddings.shape == (4, 64)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-5)
    assert encode(texts=tf.constant([], tf.string))["embeddings"].shape == (0, 64)
    searcher = load_export(str(exports["brute-force"][0] / "searcher" / "1")).signatures["search"]
    empty = searcher(queries=tf.constant([], tf.string), k=tf.constant(5))
    assert empty["ids"].shape == (0, 5)
    clipped = searcher(queries=tf.constant([b"\xff"]), k=tf.constant(10_000))
    assert clipped["ids"].shape == (1, 300)


def test_loading_without_load_export_names_the_imports(exports, tmp_path):
    script = (
        "import tensorflow as tf\n"
        f"tf.saved_model.load({str(exports['brute-force'][0] / 'encoder' / '1')!r})\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    # TF names the first unregistered TF Text op: SentencepieceOp or SentencepieceTokenizeOp.
    assert result.returncode != 0 and "Op type not registered 'Sentencepiece" in result.stderr


def test_bfloat16_encoder_export_is_close_to_float32(tmp_path, tiny_model_dir, tiny_encoder):
    assert main(["export", "--model", tiny_model_dir, "--out", str(tmp_path), "--precision", "bfloat16"]) == 0
    loaded = load_export(str(tmp_path / "encoder" / "1"))
    embeddings = loaded.signatures["encode_documents"](texts=tf.constant(TEXTS))["embeddings"].numpy()
    expected = tiny_encoder.encode_documents(TEXTS)
    assert not np.array_equal(embeddings, expected)
    np.testing.assert_allclose(np.sum(embeddings * expected, axis=1), 1.0, atol=1e-3)
