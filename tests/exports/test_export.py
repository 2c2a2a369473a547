import glob
import json
import os
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO
from doc_snippets import python_blocks
from search_inputs import unpack_codes_in_place
from tensorflow.core.protobuf import saved_model_pb2

import gtr_keras
from gtr_keras.cli.main import main
from gtr_keras.errors import UserError
from gtr_keras.exports.savedmodel.export import export_encoder, export_searcher
from gtr_keras.exports.savedmodel.loader import load_export
from gtr_keras.retrieval.index_building import build_index
from gtr_keras.retrieval.passages import window_corpus
from gtr_keras.storage.search_index import SearchIndex

REQUESTS = os.path.join(REPO, "deploy", "tf_serving", "requests")
TEXTS = ["what is the lift of a wing?", "", "boundary layer " * 400, "Ünïcödé 北京"]
QUERIES = ["wing lift", "heat transfer at hypersonic speed", "buckling of thin cylinders"]


def _metadata(i):
    return {"part": i % 7, "half": ["first", "second"][i >= 150], "tags": [["a", "b", "c"][i % 3]], "odd": i % 2 == 1}


@pytest.fixture(scope="module")
def exports(tmp_path_factory, tiny_model_dir):
    """Encoder + searcher exports over a 300-document slice of the bundled Cranfield corpus."""
    from gtr_keras.beir.readers import load_corpus

    root = tmp_path_factory.mktemp("exports")
    corpus = load_corpus(os.path.join(REPO, "gtr_keras", "assets", "cranfield"))
    lines = [
        json.dumps({"_id": doc_id, "title": title, "text": text, "metadata": _metadata(i)}) + "\n"
        for i, (doc_id, title, text) in enumerate(list(zip(corpus.ids, corpus.titles, corpus.texts))[:300])
    ]
    (root / "corpus.jsonl").write_text("".join(lines))
    # The same documents encoded in two embedding files, for `index --embeddings`.
    (root / "emb").mkdir()
    for half, rows in enumerate((lines[:170], lines[170:])):
        (root / f"half-{half}.jsonl").write_text("".join(rows))
        assert (
            main(
                [
                    "encode",
                    "--model",
                    tiny_model_dir,
                    "--input",
                    str(root / f"half-{half}.jsonl"),
                    "--output",
                    str(root / "emb" / f"part-{half}.npy"),
                ]
            )
            == 0
        )
    out = {}
    for name, searcher, source, index_flags in (
        ("scann", "scann", ["--model", tiny_model_dir, "--corpus", str(root / "corpus.jsonl")], []),
        (
            "brute-force",
            "brute-force",
            ["--model", tiny_model_dir, "--corpus", str(root / "corpus.jsonl")],
            ["--exact"],
        ),
        ("scann-embeddings", "scann", ["--embeddings", str(root / "emb" / "*.npy")], []),
    ):
        index_dir = root / f"index-{name}"
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("gtr_keras.storage.search_index.EXACT_MAX_N", 10)  # ScaNN even for 300 documents
            patch.setattr("gtr_keras.storage.embedding_files._CHUNK_ROWS", 128)  # ScaNN fed in 3 chunks
            assert main(["index", *source, "--out", str(index_dir), *index_flags]) == 0
        assert (
            main(
                [
                    "export",
                    "--model",
                    tiny_model_dir,
                    "--index",
                    str(index_dir),
                    "--searcher",
                    searcher,
                    "--out",
                    str(root / name),
                    "-k",
                    "5",
                ]
            )
            == 0
        )
        out[name] = (root / name, index_dir)
    return out


@pytest.mark.large
@pytest.mark.slow
def test_hub_load_tfsmlayer_and_keraslayer_in_fresh_process_match_cli_encode(exports, tiny_model_dir, tmp_path):
    encoder_dir = exports["scann"][0] / "encoder" / "1"
    texts_file = tmp_path / "texts.txt"
    texts_file.write_text("\n".join(TEXTS) + "\n")
    expected = {}
    for kind in ("query", "document"):
        out = tmp_path / f"{kind}.npy"
        assert (
            main(
                ["encode", "--model", tiny_model_dir, "--input", str(texts_file), "--output", str(out), "--kind", kind]
            )
            == 0
        )
        expected[kind] = np.load(out)
    script = f"""
import json, sys, numpy as np, tensorflow as tf, tensorflow_text, tensorflow_hub as hub, keras
texts = tf.constant(json.loads(sys.argv[1]))
hub_model = hub.load({str(encoder_dir)!r})
np.save({str(tmp_path / "hub_q.npy")!r}, hub_model.signatures["encode_queries"](texts=texts)["embeddings"].numpy())
np.save({str(tmp_path / "hub_d.npy")!r}, hub_model.signatures["serving_default"](texts=texts)["embeddings"].numpy())
inputs = keras.Input(shape=(), dtype="string")
layer = keras.layers.TFSMLayer({str(encoder_dir)!r}, call_endpoint="encode_queries")
model = keras.Model(inputs, layer(inputs))
np.save({str(tmp_path / "tfsm_q.npy")!r}, model(texts)["embeddings"].numpy())
import tf_keras
hub_layer = hub.KerasLayer({str(encoder_dir)!r}, signature="encode_queries", output_key="embeddings")
strings = tf_keras.Input(shape=(), dtype=tf.string)
np.save({str(tmp_path / "keraslayer_q.npy")!r}, tf_keras.Model(strings, hub_layer(strings))(texts).numpy())
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


@pytest.mark.parametrize("searcher", ["scann", "brute-force", "scann-embeddings"])
def test_searcher_returns_the_same_ids_as_the_search_command(exports, tiny_model_dir, capsys, searcher):
    export_dir, index_dir = exports[searcher]
    capsys.readouterr()
    assert main(["search", "--index", str(index_dir), "--model", tiny_model_dir, *QUERIES, "-k", "5", "--json"]) == 0
    expected = [[hit["id"] for hit in row["hits"]] for row in json.loads(capsys.readouterr().out)]
    loaded = load_export(str(export_dir / "searcher" / "1"))
    result = loaded.signatures["serving_default"](queries=tf.constant(QUERIES))
    assert [[i.decode() for i in row] for row in result["ids"].numpy()] == expected
    with_k = loaded.signatures["search"](queries=tf.constant(QUERIES), k=tf.constant([3, 3, 3]))
    assert [[i.decode() for i in row] for row in with_k["ids"].numpy()] == [row[:3] for row in expected]
    assert with_k["scores"].dtype == tf.float32 and with_k["ids"].shape == (3, 3)
    # k per query: a batch is as wide as its largest k; a row's places past its k are padding.
    mixed = loaded.signatures["search"](queries=tf.constant(QUERIES), k=tf.constant([1, 5, 2]))
    ids, scores = [[i.decode() for i in row] for row in mixed["ids"].numpy()], mixed["scores"].numpy()
    assert ids == [expected[0][:1] + [""] * 4, expected[1], expected[2][:2] + [""] * 3]
    assert (scores[0, 1:] == -2.0).all() and (scores[2, 2:] == -2.0).all() and (scores[:, 0] > -1.0001).all()


FILTERS = [["part = 3"], ["part >= 5", "half = second"], ["tags in (a, c)", "odd != true"], ["part in (1, 2)"]]


@pytest.mark.parametrize("searcher", ["scann", "brute-force"])
def test_the_filtered_searcher_answers_as_search_with_the_filter(exports, tiny_model_dir, capsys, searcher):
    export_dir, index_dir = exports[searcher]
    loaded = load_export(str(export_dir / "searcher" / "1"))
    for clauses in FILTERS:
        capsys.readouterr()
        flags = [arg for clause in clauses for arg in ("--filter", clause)]
        assert (
            main(
                ["search", "--index", str(index_dir), "--model", tiny_model_dir, *QUERIES, "-k", "5", "--json", *flags]
            )
            == 0
        )
        expected = [[hit["id"] for hit in row["hits"]] for row in json.loads(capsys.readouterr().out)]
        result = loaded.signatures["search_filtered"](
            queries=tf.constant(QUERIES), k=tf.constant([5] * len(QUERIES)), filter=tf.constant(clauses)
        )
        assert [[i.decode() for i in row] for row in result["ids"].numpy()] == expected, clauses
    unfiltered = loaded.signatures["search_filtered"](
        queries=tf.constant(QUERIES), k=tf.constant([5] * len(QUERIES)), filter=tf.constant([], tf.string)
    )
    plain = loaded.signatures["search"](queries=tf.constant(QUERIES), k=tf.constant([5] * len(QUERIES)))
    assert unfiltered["ids"].numpy().tolist() == plain["ids"].numpy().tolist()
    for clause, message in (
        ("genre = x", "unknown field"),
        ("part >", "cannot parse"),
        ("half < 3", "compare numbers"),
    ):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            loaded.signatures["search_filtered"](
                queries=tf.constant(QUERIES[:1]), k=tf.constant([5]), filter=tf.constant([clause])
            )


@pytest.mark.large
def test_a_searcher_exported_from_a_remote_index_keeps_the_base_segment_s_metadata(exports, tiny_encoder):
    export_dir, index_dir = exports["brute-force"]
    remote = f"ram://export-tests/{uuid.uuid4().hex}/index"
    for directory, _, names in tf.io.gfile.walk(str(index_dir)):
        target = remote + directory[len(str(index_dir)) :]
        tf.io.gfile.makedirs(target)
        for name in names:
            tf.io.gfile.copy(os.path.join(directory, name), f"{target}/{name}")
    export_searcher(tiny_encoder, remote, f"{remote}-export", searcher="brute-force", k=5)
    loaded = load_export(f"{remote}-export/searcher/1")
    local = load_export(str(export_dir / "searcher" / "1"))
    for clauses in FILTERS:
        arguments = {
            "queries": tf.constant(QUERIES),
            "k": tf.constant([5] * len(QUERIES)),
            "filter": tf.constant(clauses),
        }
        expected = local.signatures["search_filtered"](**arguments)["ids"].numpy().tolist()
        assert loaded.signatures["search_filtered"](**arguments)["ids"].numpy().tolist() == expected, clauses


def test_a_filter_allowing_fewer_than_k_documents_pads_the_rest(exports):
    loaded = load_export(str(exports["scann"][0] / "searcher" / "1"))
    clauses = ["part = 3", "half = first", "odd = true", "tags = a"]  # documents 3, 45, 87 and 129
    result = loaded.signatures["search_filtered"](
        queries=tf.constant(QUERIES[:1]), k=tf.constant([5]), filter=tf.constant(clauses)
    )
    ids, scores = [i.decode() for i in result["ids"].numpy()[0]], result["scores"].numpy()[0]
    assert len([i for i in ids if i]) == 4 and ids[4] == "" and scores[4] == -2.0


def _export(tiny_model_dir, index_dir, searcher, out):
    return main(
        ["export", "--model", tiny_model_dir, "--index", str(index_dir), "--searcher", searcher, "--out", str(out)]
    )


@pytest.mark.large
def test_a_scann_searcher_of_packed_ah_codes_answers_as_one_of_codes_a_byte_each(exports, tiny_model_dir, tmp_path):
    """The searcher exported from an index with packed codes (the export unpacks them for ScaNN's ops) and from
    the same index as the last release wrote it."""
    index_dir = tmp_path / "index"
    shutil.copytree(exports["scann"][1], index_dir)
    unpack_codes_in_place(index_dir / "index" / "scann")
    assert _export(tiny_model_dir, index_dir, "scann", tmp_path / "out") == 0
    asked = {"queries": tf.constant(QUERIES), "k": tf.constant([10] * len(QUERIES))}
    packed = load_export(str(exports["scann"][0] / "searcher" / "1")).signatures["search"](**asked)
    unpacked = load_export(str(tmp_path / "out" / "searcher" / "1")).signatures["search"](**asked)
    assert packed["ids"].numpy().tolist() == unpacked["ids"].numpy().tolist()
    np.testing.assert_array_equal(packed["scores"].numpy(), unpacked["scores"].numpy())


def test_a_scann_index_exports_its_float32_vectors_as_brute_force_unless_it_keeps_none(
    exports, tiny_model_dir, tmp_path, capsys
):
    assert _export(tiny_model_dir, exports["scann"][1], "brute-force", tmp_path / "out") == 0
    exact = load_export(str(exports["brute-force"][0] / "searcher" / "1"))  # an exact index of the same documents
    from_scann = load_export(str(tmp_path / "out" / "searcher" / "1"))
    asked = {"queries": tf.constant(QUERIES), "k": tf.constant([5] * len(QUERIES))}
    found = from_scann.signatures["search"](**asked)
    assert found["ids"].numpy().tolist() == exact.signatures["search"](**asked)["ids"].numpy().tolist()
    # An index built with reorder 'int8' (ScaNN's int8 copy only) has none to export.
    old = tmp_path / "old"
    shutil.copytree(exports["scann"][1], old)
    config = json.loads((old / "index" / "index.json").read_text())
    config["params"].update(reorder="int8")
    del config["params"]["rescore_factor"]
    (old / "index" / "index.json").write_text(json.dumps(config))
    (old / "index" / "embeddings.npy").unlink()
    capsys.readouterr()
    assert _export(tiny_model_dir, old, "brute-force", tmp_path / "out2") == 2
    assert "the brute-force searcher needs float32 vectors, but this index keeps no float32" in capsys.readouterr().err
    assert not (tmp_path / "out2").exists()


def test_the_scann_int8_searcher_leaves_the_float32_vectors_out(exports, tiny_model_dir, tmp_path):
    """`--searcher scann-int8`: ScaNN's int8 order, no float32 variable; `scann` rescores with float32 in the
    graph as `SearchIndex.search` does: its scores are the float32 dot products."""
    assert _export(tiny_model_dir, exports["scann"][1], "scann-int8", tmp_path / "out") == 0
    int8 = load_export(str(tmp_path / "out" / "searcher" / "1"))
    rescored = load_export(str(exports["scann"][0] / "searcher" / "1"))
    assert not hasattr(int8, "doc_embeddings") and rescored.doc_embeddings.shape[0] == 300
    index = SearchIndex.load(exports["scann"][1] / "index")
    index.set_search_params({"rescore_factor": 1})  # float32 orders the int8 order's top k: int8's hits
    k, queries = tf.constant([5] * len(QUERIES)), tf.constant(QUERIES)
    vectors = load_export(str(exports["scann"][0] / "encoder" / "1")).signatures["encode_queries"](texts=queries)
    hits = index.search_ids(vectors["embeddings"].numpy(), 5)[0]
    found = int8.signatures["search"](queries=queries, k=k)
    assert [{i.decode() for i in row} for row in found["ids"].numpy()] == [set(row) for row in hits]
    scores = rescored.signatures["search"](queries=queries, k=k)["scores"].numpy()
    index.set_search_params({"rescore_factor": 4})
    np.testing.assert_allclose(scores, index.search(vectors["embeddings"].numpy(), 5)[1], atol=1e-5)


def _tf_text_ops():
    import tensorflow_text

    names = set()
    for library in glob.glob(os.path.join(os.path.dirname(tensorflow_text.__file__), "python", "ops", "_*.so")):
        module = tf.load_op_library(library)
        # Generated op modules expose each op under its CamelCase op name, with "_" for the ">" of "TFText>".
        names.update(
            n.replace("TFText_", "TFText>", 1)
            for n in dir(module)
            if n[0].isupper() and callable(getattr(module, n)) and n != "Annotated"
        )
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
        assert "TFText>FastSentencepieceTokenize" in ops  # the walk does see the graph's ops
        assert ops <= allowed, ops - allowed
    scann_ops = _ops_in_saved_model(exports["scann"][0] / "searcher" / "1") - allowed
    assert scann_ops and all(op.startswith("Scann") for op in scann_ops), scann_ops


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "gtr_keras", "saved-model-cli", *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.mark.large
@pytest.mark.slow
def test_saved_model_cli_show_and_run(exports):
    encoder_dir = str(exports["brute-force"][0] / "encoder" / "1")
    shown = _cli("show", "--dir", encoder_dir, "--all")
    for signature in ("serving_default", "encode_queries", "encode_documents"):
        assert f"signature_def['{signature}']" in shown
    assert "DT_STRING" in shown and "outputs['embeddings']" in shown
    ran = _cli(
        "run",
        "--dir",
        encoder_dir,
        "--tag_set",
        "serve",
        "--signature_def",
        "encode_queries",
        "--input_exprs",
        'texts=["wing lift", ""]',
    )
    assert "Result for output key embeddings" in ran
    searcher_dir = str(exports["scann"][0] / "searcher" / "1")
    ran = _cli(
        "run",
        "--dir",
        searcher_dir,
        "--tag_set",
        "serve",
        "--signature_def",
        "search",
        "--input_exprs",
        'queries=["wing lift"];k=[3]',
    )
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
        ((name, spec),) = specs.items()
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
    for kind in ("scann", "brute-force"):
        signatures = load_export(str(exports[kind][0] / "searcher" / "1")).signatures
        empty = signatures["serving_default"](queries=tf.constant([], tf.string))
        assert empty["ids"].shape == (0, 5) and empty["scores"].shape == (0, 5), kind
        assert signatures["search"](queries=tf.constant([], tf.string), k=tf.constant([], tf.int32))["ids"].shape == (
            0,
            0,
        )
        clipped = signatures["search"](queries=tf.constant([b"\xff"]), k=tf.constant([10_000]))
        assert clipped["ids"].shape == (1, 300), kind
        for bad_k in (0, -3):
            with pytest.raises(tf.errors.InvalidArgumentError, match="k must be at least 1"):
                signatures["search"](queries=tf.constant(["wing"]), k=tf.constant([bad_k]))


@pytest.mark.parametrize("flag", ["0", "-1", "x"])
def test_cli_refuses_k_below_one_before_loading_anything(flag, tmp_path, capsys):
    for command in (
        ["search", "--index", str(tmp_path), "--model", str(tmp_path), "query"],
        ["export", "--model", str(tmp_path), "--out", str(tmp_path / "out")],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, "-k", flag])
        assert exit_info.value.code == 2 and "-k" in capsys.readouterr().err


def test_invalid_utf8_is_read_alike_by_the_export_and_the_cli(exports, tiny_model_dir, tmp_path):
    texts = [b"bad \xff\xfe bytes", b"cut \xe2\x82", b"ok caf\xc3\xa9", b"\xc0\xaf overlong", b"\xed\xa0\x80 surrogate"]
    path = tmp_path / "texts.txt"
    path.write_bytes(b"\n".join(texts) + b"\n")
    out = tmp_path / "cli.npy"
    assert main(["encode", "--model", tiny_model_dir, "--input", str(path), "--output", str(out)]) == 0
    loaded = load_export(str(exports["brute-force"][0] / "encoder" / "1"))
    exported = loaded.signatures["encode_documents"](texts=tf.constant(texts))["embeddings"].numpy()
    np.testing.assert_allclose(exported, np.load(out), atol=1e-5)


@pytest.mark.large
def test_loading_without_load_export_names_the_imports(exports, tmp_path):
    script = f"import tensorflow as tf\ntf.saved_model.load({str(exports['brute-force'][0] / 'encoder' / '1')!r})\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode != 0 and "Op type not registered 'TFText>FastSentencepieceTokenize'" in result.stderr


def test_bfloat16_encoder_export_is_close_to_float32(tmp_path, tiny_model_dir, tiny_encoder):
    assert main(["export", "--model", tiny_model_dir, "--out", str(tmp_path), "--precision", "bfloat16"]) == 0
    loaded = load_export(str(tmp_path / "encoder" / "1"))
    embeddings = loaded.signatures["encode_documents"](texts=tf.constant(TEXTS))["embeddings"].numpy()
    expected = tiny_encoder.encode_documents(TEXTS)
    assert not np.array_equal(embeddings, expected)
    np.testing.assert_allclose(np.sum(embeddings * expected, axis=1), 1.0, atol=1e-3)


def _run_fresh(script, cwd=None):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.large
def test_encoder_is_a_tf_hub_reusable_saved_model(exports, tiny_model_dir, tmp_path):
    encoder_dir = exports["brute-force"][0] / "encoder" / "1"
    expected = gtr_keras.load(tiny_model_dir).encode_documents(TEXTS)
    np.save(tmp_path / "expected.npy", expected)
    out = _run_fresh(f"""
import json, numpy as np, tensorflow as tf, tensorflow_hub as hub, tensorflow_text
obj = hub.load({str(encoder_dir)!r})
texts = tf.constant({TEXTS!r})
expected = np.load({str(tmp_path / "expected.npy")!r})
for embeddings in (obj(texts), obj(texts, training=False)):
    assert embeddings.dtype == tf.float32 and embeddings.shape == expected.shape
    np.testing.assert_allclose(embeddings.numpy(), expected, atol=1e-5)
print(json.dumps([len(obj.variables), len(obj.trainable_variables), len(obj.regularization_losses),
                  all(isinstance(v, tf.Variable) for v in obj.trainable_variables)]))
""")
    assert json.loads(out.splitlines()[-1]) == [28, 28, 0, True]


@pytest.mark.large
def test_keras_layer_without_signature_and_trainable_fine_tuning(exports, tmp_path):
    encoder_dir = exports["brute-force"][0] / "encoder" / "1"
    out = _run_fresh(f"""
import json, numpy as np, tensorflow as tf, tensorflow_hub as hub, tensorflow_text, tf_keras
texts = tf.constant(["wing lift", "boundary layer", "shock wave", "heat transfer"])
frozen = hub.KerasLayer({str(encoder_dir)!r})
assert frozen(texts).shape == (4, 64) and not frozen.trainable_weights
layer = hub.KerasLayer({str(encoder_dir)!r}, trainable=True)
strings = tf_keras.Input(shape=(), dtype=tf.string)
model = tf_keras.Model(strings, tf_keras.layers.Dense(1)(layer(strings)))
before = [w.numpy() for w in layer.trainable_weights]
outputs_before = layer(texts).numpy()
model.compile(optimizer=tf_keras.optimizers.SGD(0.5), loss="mse")
model.fit(texts, tf.constant([[1.0], [-1.0], [1.0], [-1.0]]), epochs=3, batch_size=4, verbose=0)
moved = sum(not np.array_equal(a, w.numpy()) for a, w in zip(before, layer.trainable_weights))
print(json.dumps([len(layer.trainable_weights), moved, float(np.abs(layer(texts).numpy() - outputs_before).max())]))
""")
    count, moved, change = json.loads(out.splitlines()[-1])
    assert count == 28 and moved >= 20 and change > 1e-4


def test_each_weight_is_stored_once(tmp_path):
    from gtr_keras.cli.helpers.demo_steps import DEMO_MODEL
    from gtr_keras.models.gtr.presets import parameter_count, preset_config

    encoder = gtr_keras.load(DEMO_MODEL)
    target = export_encoder(encoder, str(tmp_path))
    parameters = encoder.model.count_params()
    assert parameters == parameter_count(preset_config("gtr-small", vocabulary_size=32_100)) == 11_038_080
    stored = sum(os.path.getsize(path) for path in glob.glob(os.path.join(target, "variables", "*")))
    assert stored <= 1.05 * 4 * parameters, (stored, 4 * parameters)


@pytest.mark.large
def test_load_export_is_public_in_serving_and_names_the_missing_import(exports):
    import gtr_keras.exports

    assert gtr_keras.exports.load_export is load_export
    searcher_dir = exports["scann"][0] / "searcher" / "1"
    out = _run_fresh(f"""
import sys
sys.modules["scann"] = None  # as on a machine without ScaNN
import gtr_keras.exports
try:
    gtr_keras.exports.load_export({str(searcher_dir)!r})
except RuntimeError as error:
    print("HINT", error)
""")
    assert "HINT" in out and "import scann" in out and "Scann" in out


@pytest.mark.large
@pytest.mark.slow
def test_docs_tf_hub_client_snippets_run(exports, tmp_path):
    snippets = python_blocks("docs/serving.md", "Use from TF Hub clients")
    assert len(snippets) == 3
    os.makedirs(tmp_path / "exports" / "gtr")
    os.symlink(exports["brute-force"][0] / "encoder", tmp_path / "exports" / "gtr" / "encoder")
    for snippet in snippets:
        _run_fresh(snippet, cwd=tmp_path)


def _batching_parameters_class():
    """TF Serving's `BatchingParameters` (session_bundle_config.proto), which the tensorflow-serving-api
    wheel does not ship: declared here by its fields' names and types, which is what text format reads."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    proto = descriptor_pb2.FileDescriptorProto(
        name="gtr_keras_test/batching.proto",
        package="gtr_keras_test",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    message = proto.message_type.add(name="BatchingParameters")
    kinds = descriptor_pb2.FieldDescriptorProto
    fields = [
        ("max_batch_size", ".google.protobuf.Int64Value"),
        ("batch_timeout_micros", ".google.protobuf.Int64Value"),
        ("max_enqueued_batches", ".google.protobuf.Int64Value"),
        ("num_batch_threads", ".google.protobuf.Int64Value"),
        ("thread_pool_name", ".google.protobuf.StringValue"),
        ("allowed_batch_sizes", None),
        ("pad_variable_length_inputs", None),
        ("enable_large_batch_splitting", ".google.protobuf.BoolValue"),
        ("max_execution_batch_size", ".google.protobuf.Int64Value"),
    ]
    for number, (name, type_name) in enumerate(fields, start=1):
        field = message.field.add(name=name, number=number, label=kinds.LABEL_OPTIONAL)
        if type_name:
            field.type, field.type_name = kinds.TYPE_MESSAGE, type_name
        elif name == "allowed_batch_sizes":
            field.type, field.label = kinds.TYPE_INT64, kinds.LABEL_REPEATED
        else:
            field.type = kinds.TYPE_BOOL
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("gtr_keras_test.BatchingParameters"))


def _serving_client(name):
    """A module of deploy/tf_serving (`grpc_client`, `sharded_client`)."""
    import importlib

    sys.path.insert(0, os.path.join(REPO, "deploy", "tf_serving"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def test_serving_configs_parse_and_fit_every_served_signature(exports):
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    serving = os.path.join(REPO, "deploy", "tf_serving")
    with open(os.path.join(serving, "models.config")) as f:
        config = text_format.Parse(f.read(), model_server_config_pb2.ModelServerConfig())
    models = {model.name: model for model in config.model_config_list.config}
    assert {name: (m.base_path, m.model_platform) for name, m in models.items()} == {
        "gtr_encoder": ("/models/gtr/encoder", "tensorflow"),
        "gtr_searcher": ("/models/gtr/searcher", "tensorflow"),
    }
    with open(os.path.join(serving, "batching.config")) as f:
        batching = text_format.Parse(f.read(), _batching_parameters_class()())
    assert batching.max_batch_size.value == _serving_client("grpc_client").MAX_BATCH_SIZE == 256
    assert not batching.enable_large_batch_splitting.value
    # Batching needs the batch dimension first on every input and output of every served signature.
    for searcher in ("scann", "brute-force"):
        for model in ("encoder", "searcher"):
            for name, signature in load_export(str(exports[searcher][0] / model / "1")).signatures.items():
                specs = [*signature.structured_input_signature[1].values(), *signature.structured_outputs.values()]
                assert all(spec.shape.rank >= 1 and spec.shape[0] is None for spec in specs), (model, name)


def test_grpc_client_requests_run_against_the_export(exports):
    grpc_client = _serving_client("grpc_client")
    texts = ["wing lift", "boundary layer", "", "shock wave", "heat transfer"]
    cases = [
        ("gtr_encoder", "encode_queries", None),
        ("gtr_encoder", "serving_default", None),
        ("gtr_searcher", "serving_default", None),
        ("gtr_searcher", "search", 3),
    ]
    for model, signature_name, k in cases:
        loaded = load_export(str(exports["brute-force"][0] / model.removeprefix("gtr_") / "1"))
        signature = loaded.signatures[signature_name]
        requests = grpc_client.build_requests(model, signature_name, texts, k, chunk_size=2)
        assert len(requests) == 3
        rows = 0
        for request in requests:
            assert request.model_spec.name == model and request.model_spec.signature_name == signature_name
            specs = signature.structured_input_signature[1]
            assert set(request.inputs) == set(specs)
            inputs = {
                name: tf.constant(tf.make_ndarray(proto), specs[name].dtype) for name, proto in request.inputs.items()
            }
            outputs = signature(**inputs)
            rows += next(iter(outputs.values())).shape[0]
            if k:
                assert outputs["ids"].shape[1] == k
        assert rows == len(texts)
    with pytest.raises(ValueError, match="--k"):
        grpc_client.build_requests("gtr_searcher", "search", texts)
    # A searcher served under another name (a shard's, for sharded_client.py) takes queries too.
    (request,) = grpc_client.build_requests("gtr_searcher_shard_b", "search", texts, 3, chunk_size=8)
    assert set(request.inputs) == {"queries", "k"}


def test_a_failed_searcher_export_leaves_the_previous_encoder_and_searcher_intact(
    exports, tiny_model_dir, tmp_path, monkeypatch, capsys
):
    import shutil

    from gtr_keras.exports.savedmodel import export

    out, index_dir = tmp_path / "out", exports["brute-force"][1]
    shutil.copytree(exports["brute-force"][0], out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def failing(encoder, index_dir, staging, searcher, k, search_params=None):
        (staging / "saved_model.pb").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "write_searcher", failing)
    assert (
        main(
            [
                "export",
                "--model",
                tiny_model_dir,
                "--index",
                str(index_dir),
                "--out",
                str(out),
                "--searcher",
                "brute-force",
            ]
        )
        == 2
    )
    assert "No space left on device" in capsys.readouterr().err
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(out / "encoder")) == ["1"] and sorted(os.listdir(out / "searcher")) == ["1"]


def test_export_refuses_an_index_of_another_model_before_writing(exports, tmp_path, capsys):
    from gtr_keras.saving import load_model, save

    other_dir = tmp_path / "other-model"
    other = load_model(REPO + "/tests/fixtures/tiny-gtr-st")
    other.model.get_layer("projection").kernel.assign(other.model.get_layer("projection").kernel * 2.0)
    save(other, other_dir)
    assert (
        main(
            [
                "export",
                "--model",
                str(other_dir),
                "--index",
                str(exports["brute-force"][1]),
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert "built with another model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_exports_carry_tf_serving_warmup_requests_for_every_signature(exports):
    from tensorflow_serving.apis import prediction_log_pb2

    for kind, model in (("encoder", "gtr_encoder"), ("searcher", "gtr_searcher")):
        directory = exports["brute-force"][0] / kind / "1"
        loaded = load_export(str(directory))
        logs = [
            prediction_log_pb2.PredictionLog.FromString(record.numpy())
            for record in tf.data.TFRecordDataset(str(directory / "assets.extra" / "tf_serving_warmup_requests"))
        ]
        requests = {log.predict_log.request.model_spec.signature_name: log.predict_log.request for log in logs}
        assert set(requests) == set(loaded.signatures), kind
        for name, request in requests.items():
            assert request.model_spec.name == model
            specs = loaded.signatures[name].structured_input_signature[1]
            inputs = {
                key: tf.constant(tf.make_ndarray(proto), specs[key].dtype) for key, proto in request.inputs.items()
            }
            assert next(iter(loaded.signatures[name](**inputs).values())).shape[0] == 2, (kind, name)


def test_export_searcher_checks_its_arguments_first(tmp_path):
    with pytest.raises(UserError, match="^searcher must be one of 'scann', 'scann-int8', 'brute-force', got 'hnsw'$"):
        export_searcher(None, tmp_path / "index", tmp_path / "exports", searcher="hnsw")
    with pytest.raises(UserError, match="^k must be a positive integer, got 0$"):
        export_searcher(None, tmp_path / "index", tmp_path / "exports", k=0)
    assert not (tmp_path / "exports").exists()


@pytest.fixture(scope="module")
def shard_exports(exports, tiny_model_dir, tmp_path_factory):
    """The 300 documents as two exact shards, each exported as a brute-force searcher, and one searcher over
    both shards (`export --index A --index B`)."""
    root = tmp_path_factory.mktemp("shards")
    corpus = exports["brute-force"][1].parent / "corpus.jsonl"
    lines = corpus.read_text().splitlines(keepends=True)
    for name, rows in (("a", lines[:120]), ("b", lines[120:])):
        (root / f"{name}.jsonl").write_text("".join(rows))
        index = ["index", "--model", tiny_model_dir, "--corpus", str(root / f"{name}.jsonl"), "--exact"]
        assert main([*index, "--out", str(root / f"index-{name}")]) == 0
        export = ["export", "--model", tiny_model_dir, "--searcher", "brute-force"]
        assert main([*export, "--index", str(root / f"index-{name}"), "--out", str(root / f"export-{name}")]) == 0
    both = ["--index", str(root / "index-a"), "--index", str(root / "index-b")]
    assert (
        main(["export", "--model", tiny_model_dir, "--searcher", "brute-force", *both, "--out", str(root / "ab")]) == 0
    )
    return root


@pytest.mark.large
def test_a_client_of_two_shard_searchers_merges_their_answers_into_the_whole_corpus_top_k(
    exports, shard_exports, tiny_model_dir, capsys
):
    sharded_client = _serving_client("sharded_client")
    searchers = [load_export(str(shard_exports / f"export-{name}" / "searcher" / "1")) for name in "ab"]
    client = sharded_client.ShardedSearcher([sharded_client.saved_model_searcher(s) for s in searchers])
    ids, scores = client.search(QUERIES, 5)
    whole = load_export(str(exports["brute-force"][0] / "searcher" / "1")).signatures["search"]
    want = whole(queries=tf.constant(QUERIES), k=tf.constant([5] * len(QUERIES)))
    assert [[i.decode() for i in row] for row in ids] == [[i.decode() for i in row] for row in want["ids"].numpy()]
    np.testing.assert_allclose(scores, want["scores"].numpy(), atol=1e-5)
    one_searcher = load_export(str(shard_exports / "ab" / "searcher" / "1")).signatures["search"]
    both = one_searcher(queries=tf.constant(QUERIES), k=tf.constant([5] * len(QUERIES)))
    assert both["ids"].numpy().tolist() == want["ids"].numpy().tolist()
    assert (
        main(
            [
                "search",
                "--model",
                tiny_model_dir,
                "--index",
                str(shard_exports / "index-a"),
                "--index",
                str(shard_exports / "index-b"),
                "--json",
                "-k",
                "5",
                *QUERIES,
            ]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert [[hit["id"] for hit in row["hits"]] for row in shown] == [[i.decode() for i in r] for r in ids]


@pytest.mark.large
def test_an_updated_index_exports_as_the_next_version_and_served_versions_stay(exports, tiny_model_dir, tmp_path):
    import shutil

    index_dir = tmp_path / "index"
    shutil.copytree(exports["brute-force"][1], index_dir)
    out = tmp_path / "export"
    export = ["export", "--model", tiny_model_dir, "--index", str(index_dir), "--out", str(out)]
    assert main([*export, "--searcher", "brute-force"]) == 0
    served = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    first_id = load_export(str(out / "searcher" / "1")).signatures["serving_default"](queries=tf.constant(QUERIES[:1]))
    (tmp_path / "gone.txt").write_text(first_id["ids"].numpy()[0][0].decode() + "\n")
    assert main(["update", str(index_dir), "--delete", str(tmp_path / "gone.txt")]) == 0
    assert main([*export, "--searcher", "brute-force"]) == 0
    assert sorted(os.listdir(out / "searcher")) == sorted(os.listdir(out / "encoder")) == ["1", "2"]
    assert {
        p: b
        for p, b in ((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
        if p.parts[1] == "1"
    } == served
    new = load_export(str(out / "searcher" / "2")).signatures["serving_default"](queries=tf.constant(QUERIES[:1]))
    assert first_id["ids"].numpy()[0][0] not in new["ids"].numpy()[0]
    assert new["ids"].numpy()[0][0] == first_id["ids"].numpy()[0][1]


@pytest.mark.large
def test_an_updated_scann_index_exports_its_live_rows(exports, tiny_model_dir, tmp_path):
    import shutil

    from gtr_keras.retrieval.retriever import Retriever

    index_dir = tmp_path / "index"
    shutil.copytree(exports["scann"][1], index_dir)
    (tmp_path / "gone.txt").write_text("".join(f"{i}\n" for i in list(_index_ids(index_dir))[:50]))
    assert main(["update", str(index_dir), "--delete", str(tmp_path / "gone.txt")]) == 0
    assert main(["export", "--model", tiny_model_dir, "--index", str(index_dir), "--out", str(tmp_path / "e")]) == 0
    searcher = load_export(str(tmp_path / "e" / "searcher" / "1")).signatures["search"]
    found = searcher(queries=tf.constant(QUERIES), k=tf.constant([10] * len(QUERIES)))["ids"].numpy()
    expected = Retriever.load(index_dir, gtr_keras.load(tiny_model_dir)).search(QUERIES, 10)
    assert [[i.decode() for i in row] for row in found] == [[hit["id"] for hit in row] for row in expected]


def _index_ids(index_dir):
    from gtr_keras.storage.search_index import SearchIndex

    return SearchIndex.load(index_dir).ids


@pytest.mark.large
def test_scann_searchers_over_two_shards_answer_as_the_shards_searched_together(tiny_model_dir, tmp_path):
    from gtr_keras.beir.readers import load_corpus
    from gtr_keras.retrieval.index_building import build_index
    from gtr_keras.retrieval.retriever import Retriever

    encoder = gtr_keras.load(tiny_model_dir)
    corpus = load_corpus(os.path.join(REPO, "gtr_keras", "assets", "cranfield"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("gtr_keras.storage.search_index.EXACT_MAX_N", 10)  # ScaNN even for small shards
        for name, rows in (("a", slice(0, 150)), ("b", slice(150, 300))):
            part = type(corpus)(corpus.ids[rows], corpus.titles[rows], corpus.texts[rows])
            build_index(encoder, part, tmp_path / name, model_dir=tiny_model_dir)
    shards = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert (
        main(
            [
                "export",
                "--model",
                tiny_model_dir,
                "--index",
                shards[0],
                "--index",
                shards[1],
                "--out",
                str(tmp_path / "e"),
            ]
        )
        == 0
    )
    searcher = load_export(str(tmp_path / "e" / "searcher" / "1")).signatures["search"]
    found = searcher(queries=tf.constant(QUERIES), k=tf.constant([10] * len(QUERIES)))
    expected = Retriever.load(shards, encoder).search(QUERIES, 10)
    assert [[i.decode() for i in row] for row in found["ids"].numpy()] == [[h["id"] for h in row] for row in expected]
    np.testing.assert_allclose(found["scores"].numpy(), [[h["score"] for h in row] for row in expected], atol=1e-5)
    # Each shard's own ScaNN searcher, both loaded in this process (one ScaNN resource each), merged by the client.
    sharded_client = _serving_client("sharded_client")
    for shard in shards:
        assert main(["export", "--model", tiny_model_dir, "--index", shard, "--out", f"{shard}-export"]) == 0
    loaded = [load_export(f"{shard}-export/searcher/1") for shard in shards]
    client = sharded_client.ShardedSearcher([sharded_client.saved_model_searcher(s) for s in loaded])
    ids, _ = client.search(QUERIES, 10)
    assert [[i.decode() for i in row] for row in ids] == [[h["id"] for h in row] for row in expected]


def test_a_refused_export_of_overlapping_shards_leaves_no_empty_folders(tiny_model_dir, tiny_encoder, tmp_path):
    from gtr_keras.beir.readers import Corpus
    from gtr_keras.retrieval.index_building import build_index

    corpus = Corpus(["d0", "d1", "d2"], ["", "", ""], ["wing lift", "heat transfer", "drag"])
    for name in ("a", "b"):  # the same ids in both shards
        build_index(tiny_encoder, corpus, str(tmp_path / name), model_dir=tiny_model_dir, kind="exact")
    argv = ["export", "--model", tiny_model_dir, "--index", str(tmp_path / "a"), "--index", str(tmp_path / "b")]
    argv += ["--searcher", "brute-force", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert not (tmp_path / "out" / "encoder").exists() and not (tmp_path / "out" / "searcher").exists()


@pytest.mark.large
def test_a_tuned_scann_index_exports_its_tuned_setting_and_a_flag_overrides_it(exports, tiny_model_dir, tmp_path):
    import shutil

    from gtr_keras.retrieval.retriever import Retriever
    from gtr_keras.storage.layout import write_tuned

    index_dir = tmp_path / "index"
    shutil.copytree(exports["scann"][1], index_dir)
    write_tuned(index_dir / "index", {"setting": {"num_leaves_to_search": 1, "reorder_factor": 1, "rescore_factor": 1}})
    encoder = gtr_keras.load(tiny_model_dir)
    tuned = Retriever.load(index_dir, encoder)
    assert tuned.index.params["num_leaves_to_search"] == 1 and tuned.index.params["reorder_factor"] == 1
    untuned = Retriever.load(index_dir, encoder)
    untuned.index.set_search_params({"num_leaves_to_search": 3, "reorder_factor": 100})
    int8_order = Retriever.load(index_dir, encoder)  # issue 62: rescore_factor 0, ScaNN's int8 order
    int8_order.index.set_search_params({"num_leaves_to_search": 3, "reorder_factor": 100, "rescore_factor": 0})
    leaves = ["--search-param", "num_leaves_to_search=3", "--search-param", "reorder_factor=100"]
    for name, flags, expected in (
        ("tuned", [], tuned),
        ("flag", leaves, untuned),
        ("int8-order", leaves + ["--search-param", "rescore_factor=0"], int8_order),
    ):
        argv = ["export", "--model", tiny_model_dir, "--index", str(index_dir), "--out", str(tmp_path / name)]
        assert main(argv + flags) == 0
        exported = load_export(str(tmp_path / name / "searcher" / "1"))
        found = exported.signatures["search"](queries=tf.constant(QUERIES), k=tf.constant([10] * len(QUERIES)))
        want = [[hit["id"] for hit in row] for row in expected.search(QUERIES, 10)]
        assert [[i.decode() for i in row if i] for row in found["ids"].numpy()] == want, name
        assert hasattr(exported, "doc_embeddings") == (name != "int8-order")  # nothing rescored: none held
    assert tuned.search(QUERIES, 10) != untuned.search(QUERIES, 10) != int8_order.search(QUERIES, 10)


@pytest.mark.large
def test_an_int8_index_exports_a_brute_force_searcher_of_its_float32_vectors(exports, tiny_model_dir, tmp_path):
    from gtr_keras.retrieval.retriever import Retriever

    corpus = exports["scann"][0].parent / "corpus.jsonl"
    index_dir = tmp_path / "index"
    argv = ["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(index_dir), "--vectors", "int8"]
    assert main(argv) == 0
    argv = ["export", "--model", tiny_model_dir, "--index", str(index_dir), "--out", str(tmp_path / "e")]
    assert main(argv + ["--searcher", "brute-force"]) == 0
    searcher = load_export(str(tmp_path / "e" / "searcher" / "1")).signatures["search"]
    found = searcher(queries=tf.constant(QUERIES), k=tf.constant([10] * len(QUERIES)))["ids"].numpy()
    retriever = Retriever.load(index_dir, gtr_keras.load(tiny_model_dir))
    retriever.index.set_search_params({"rescore": 300})  # every row rescored: exact float32 search
    expected = [[hit["id"] for hit in row] for row in retriever.search(QUERIES, 10)]
    assert [[i.decode() for i in row] for row in found] == expected


def test_a_scann_searcher_says_the_float32_bytes_it_holds_and_above_the_limit_is_refused_unless_allowed(
    exports, tiny_model_dir, tmp_path, capsys, monkeypatch
):
    """Refused before the model loads, nothing written; allowed, the one line gives the bytes, and the variable,
    filled a block of rows at a time, holds the index's float32 vectors."""
    from gtr_keras.cli.helpers import handler_inputs
    from gtr_keras.exports.savedmodel import searcher_graph

    index_dir = exports["scann"][1]
    held = 300 * SearchIndex.load(index_dir / "index").dims * 4
    monkeypatch.setattr(searcher_graph, "FLOAT32_LIMIT", held - 1)
    encoder = handler_inputs.encoder
    monkeypatch.setattr(handler_inputs, "encoder", lambda args: pytest.fail("the model loaded before the refusal"))
    assert _export(tiny_model_dir, index_dir, "scann", tmp_path / "refused") == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.count("\n") == 0
        and f"--searcher scann would hold {held / 2**30:.2f} GiB of float32 vectors (300 rows" in err
    )
    assert "export --searcher scann-int8" in err and "or pass --allow-large-float32" in err
    assert not (tmp_path / "refused").exists()
    monkeypatch.setattr(handler_inputs, "encoder", encoder)
    monkeypatch.setattr(searcher_graph, "_VARIABLE_ROWS", 7)
    argv = ["export", "--model", tiny_model_dir, "--index", str(index_dir), "--out", str(tmp_path / "out")]
    assert main([*argv, "--allow-large-float32"]) == 0
    assert f"the scann searcher holds {held:,} bytes " in capsys.readouterr().out
    searcher = load_export(str(tmp_path / "out" / "searcher" / "1"))
    np.testing.assert_array_equal(
        searcher.doc_embeddings.numpy(), SearchIndex.load(index_dir / "index").live_embeddings()
    )


@pytest.mark.large
@pytest.mark.parametrize("searcher", ["brute-force", "scann"])
def test_the_searcher_of_a_passages_index_answers_its_documents_as_search_does(
    searcher, tiny_encoder, tiny_model_dir, tmp_path
):
    rng = np.random.default_rng(0)
    words = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(5, 60)))) for _ in range(40)]
    metadata = [{"year": 2000 + i % 5} for i in range(40)]
    corpus = gtr_keras.Corpus([f"d{i}" for i in range(40)], [""] * 40, texts, metadata)
    rows, setting = window_corpus(corpus, tiny_encoder, "16:8")
    kind = "scann" if searcher == "scann" else "exact"
    build_index(tiny_encoder, rows, tmp_path / "index", tiny_model_dir, kind, passages=setting)
    index = gtr_keras.Index.open(tmp_path / "index", tiny_encoder)
    assert index.kind == kind and len(index) == 40
    written = export_searcher(tiny_encoder, tmp_path / "index", tmp_path / "exports", searcher=searcher, k=5)
    loaded = load_export(written)
    queries = ["shock boundary layer", "nozzle flutter"]
    answer = loaded.signatures["search"](queries=tf.constant(queries), k=tf.constant([5, 3]))
    filtered = loaded.signatures["search_filtered"](
        queries=tf.constant(queries[:1]), k=tf.constant([4]), filter=tf.constant(["year = 2003"])
    )
    for row, (query, k) in enumerate(zip(queries, [5, 3])):
        expected = index.search([query], k=k)[0]
        ids = [i.decode() for i in answer["ids"].numpy()[row][:k]]
        assert ids == [hit["id"] for hit in expected] and len(set(ids)) == k
        np.testing.assert_allclose(answer["scores"].numpy()[row][:k], [hit["score"] for hit in expected], atol=1e-5)
        starts, ends = answer["passage_start"].numpy()[row][:k], answer["passage_end"].numpy()[row][:k]
        assert [(int(s), int(e)) for s, e in zip(starts, ends)] == [tuple(hit["passage"].values()) for hit in expected]
    assert [i.decode() for i in answer["ids"].numpy()[1][3:]] == ["", ""]  # past its own k: padding
    expected = index.search(queries[:1], k=4, filter="year = 2003")[0]
    assert [i.decode() for i in filtered["ids"].numpy()[0]] == [hit["id"] for hit in expected]
