"""Every crash point of every write path (tests/crash_points.py): index build, update, compaction, exports,
convert both ways, save; and real SIGKILLs of `gtr-keras update` in a subprocess. Each path's count
of crash points is the one docs/reliability.md gives it.

The writers that fill a staging directory with a converter's output (tf2onnx, OpenVINO, the LiteRT
converter, a SavedModel) do so inside the staging path, which is one operation of the layer whatever
they write there: here they copy the output of one real run, so that each stop costs the commit's work
alone (the count of operations is asserted to be the real writer's).
"""

import json
import os
import shutil
import signal

import numpy as np
import pytest
from conftest import REPO, TINY_ST
from crash_points import assert_every_crash_point, assert_nothing_damaged
from killed_at import killed_at

from gtr_keras.beir.readers import Corpus
from gtr_keras.cli.main import main
from gtr_keras.errors import MismatchError
from gtr_keras.lexical.bm25_side import has_bm25_side, load_bm25_side
from gtr_keras.retrieval.index_building import build_index
from gtr_keras.retrieval.index_updates import update_index
from gtr_keras.storage.search_index import SearchIndex
from gtr_keras.storage.segments import index_documents
from gtr_keras.utils.file_operations import counting

pytestmark = pytest.mark.large

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
TEXTS = ["what keeps a wing up?", "heat transfer in a nozzle"]


def _documented_counts():
    """`{write path: crash points}` of docs/reliability.md's table (a row `| WRITE PATH | COUNT | TRIED |`)."""
    with open(os.path.join(REPO, "docs", "reliability.md"), encoding="utf-8") as f:
        rows = [line.split(" | ") for line in f if line.startswith("| ") and line.count(" | ") == 2]
    return {row[0].removeprefix("| "): row[1] for row in rows}


def assert_documented(write_path, count):
    assert str(count) == _documented_counts()[write_path], f"{write_path}: {count} crash points"


def _corpus(n, prefix="d", offset=0):
    texts = [" ".join(WORDS[(i * 7 + j + offset) % len(WORDS)] for j in range(3 + i % 5)) for i in range(n)]
    return Corpus([f"{prefix}{i}" for i in range(n)], [f"title {i}" for i in range(n)], texts)


STALE = "stale: refused until the next update or --compact rebuilds it"


def _index_state(index_dir):
    """What loads from an index directory: its live ids, a search's hits, its documents and BM25 side."""
    if not os.path.exists(os.path.join(index_dir, "retriever.json")):
        return None
    index = SearchIndex.load(os.path.join(index_dir, "index"))
    query = np.ones((1, index.dims), np.float32) / np.sqrt(index.dims)
    ids, scores = index.search_ids(query, 5)
    documents = index_documents(index)
    dense = (tuple(index.ids), tuple(ids[0]), tuple(np.round(scores[0], 5)), tuple(documents.ids))
    if not has_bm25_side(index_dir):
        return dense, None
    try:
        bm25 = load_bm25_side(index_dir, index.ids, documents).search(["wing lift heat"], 5)[0][0]
    except MismatchError:
        return dense, STALE
    return dense, tuple(bm25)


def _segment_names(index_dir):
    path = os.path.join(index_dir, "index", "segments.json")
    return [segment["name"] for segment in json.load(open(path))["segments"]] if os.path.exists(path) else ["."]


def _dense_new_bm25_stale_allowed(found, before, after):
    """The one state between an update's two commits: the dense part committed, its BM25 side not yet
    rebuilt, which search refuses with a one-line error naming the command that rebuilds it."""
    return found in (before, after) or (found is not None and found[0] == after[0] and found[1] == STALE)


@pytest.fixture(scope="module")
def templates(tmp_path_factory, tiny_encoder, tiny_model_dir):
    root = tmp_path_factory.mktemp("templates")
    build_index(tiny_encoder, _corpus(20), str(root / "built"), tiny_model_dir, kind="exact")
    shutil.copytree(root / "built", root / "updated")
    update_index(str(root / "updated"), corpus=_corpus(4, "n"), encoder=tiny_encoder, delete=["d1", "d2"])
    return root


def _copy(template):
    def prepare(directory):
        shutil.copytree(template, directory / "idx")
        return str(directory / "idx")

    return prepare


def test_index_build_replacing_an_index(templates, tiny_encoder, tiny_model_dir, tmp_path):
    count = assert_every_crash_point(
        tmp_path,
        _copy(templates / "built"),
        lambda idx: build_index(tiny_encoder, _corpus(12, "b", 3), idx, tiny_model_dir, kind="exact"),
        _index_state,
        checked=lambda idx: [idx],
    )
    assert_documented(
        "index build, replacing an index (`build_index`: resumable encoding, then the index directory)", count
    )


def test_index_update(templates, tiny_encoder, tmp_path):
    count = assert_every_crash_point(
        tmp_path,
        _copy(templates / "built"),
        lambda idx: update_index(idx, corpus=_corpus(3, "d", 5), encoder=tiny_encoder, delete=["d7"], compact=False),
        _index_state,
        checked=lambda idx: [idx],
        accept=_dense_new_bm25_stale_allowed,
    )
    assert_documented("index update: add, replace and delete, with its BM25 side (`update`)", count)


def test_index_compaction(templates, tmp_path):
    count = assert_every_crash_point(
        tmp_path,
        _copy(templates / "updated"),
        lambda idx: update_index(idx, compact=True),
        lambda idx: (_index_state(idx), _segment_names(idx)),
        checked=lambda idx: [idx],
        accept=lambda found, before, after: (
            found in (before, after)
            or (found[1] == after[1] and _dense_new_bm25_stale_allowed(found[0], before[0], after[0]))
        ),
    )
    assert_documented("index compaction (`update --compact`)", count)


def _without_names(value):
    """A JSON value without its "name" fields (Keras numbers its layers' names per process)."""
    if isinstance(value, dict):
        return {key: _without_names(item) for key, item in value.items() if key != "name"}
    return [_without_names(item) for item in value] if isinstance(value, list) else value


def _model_state(directory):
    """What a model directory (keras-hub preset) or sentence-transformers directory holds: its weights'
    values and its records (without layer names or metadata.json's date), or None where there is none."""
    import hashlib

    from gtr_keras.models.model_files.model_directory import read_weights

    if not os.path.isdir(directory) or not os.listdir(directory):
        return None
    parts = []
    for root, _, names in sorted(os.walk(directory)):
        for name in sorted(names):
            path = os.path.join(root, name)
            if name.endswith(".weights.h5"):
                parts += sorted(
                    hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest() for v in read_weights(path).values()
                )
            elif name.endswith(".json") and name not in ("checksums.json", "metadata.json"):
                parts.append(json.dumps(_without_names(json.load(open(path))), sort_keys=True))
            elif name not in ("checksums.json", "metadata.json"):
                parts.append(hashlib.sha256(open(path, "rb").read()).hexdigest())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@pytest.fixture(scope="module")
def other_model(tmp_path_factory, tiny_model_dir):
    """A model directory of the tiny model with other weights: the previous state of the model paths."""
    import gtr_keras

    encoder = gtr_keras.load(tiny_model_dir)
    variable = encoder.model.weights[0]
    variable.assign(variable * 1.5)
    directory = str(tmp_path_factory.mktemp("other") / "model")
    gtr_keras.save(encoder, directory)
    return directory


def _previous_model(other_model, name="model"):
    def prepare(directory):
        shutil.copytree(other_model, directory / name)
        return str(directory / name)

    return prepare


def _assert_model_path(tmp_path, name, other_model, run, reference):
    count = assert_every_crash_point(
        tmp_path, _previous_model(other_model), run, _model_state, checked=lambda out: [out]
    )
    assert_documented(name, count)
    import gtr_keras

    reruns = [d for d in tmp_path.iterdir() if d.name.startswith("stopped-")]
    got = gtr_keras.load(str(reruns[-1] / "model")).encode_queries(TEXTS)
    np.testing.assert_array_equal(got, gtr_keras.load(reference).encode_queries(TEXTS))


def test_save(other_model, tiny_encoder, tiny_model_dir, tmp_path):
    import gtr_keras

    _assert_model_path(
        tmp_path, "save (`gtr_keras.save`)", other_model, lambda out: gtr_keras.save(tiny_encoder, out), tiny_model_dir
    )


def test_convert_from_sentence_transformers(other_model, tiny_model_dir, tmp_path):
    _assert_model_path(
        tmp_path,
        "convert, sentence-transformers to a model directory",
        other_model,
        lambda out: main(["convert", TINY_ST, out]),
        tiny_model_dir,
    )


def test_convert_to_sentence_transformers(tiny_model_dir, tmp_path):
    other = tmp_path / "other-st"
    assert main(["convert", tiny_model_dir, str(other), "--to", "sentence-transformers"]) == 0
    variable_file = other / "config.json"
    variable_file.write_text(variable_file.read_text().replace('"num_layers": 3', '"num_layers": 3 '))
    count = assert_every_crash_point(
        tmp_path / "runs",
        lambda directory: (directory.mkdir(parents=True), str(directory / "st"))[1],
        lambda out: main(["convert", tiny_model_dir, out, "--to", "sentence-transformers"]),
        _model_state,
        checked=lambda out: [],
    )
    assert_documented("convert, a model directory to sentence-transformers", count)


def _export_state(directory):
    """What an export directory holds: each file's SHA-256 but checksums.json's (None: nothing yet)."""
    import hashlib

    if not os.path.isdir(directory):
        return None
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            if name != "checksums.json" and ".tmp-" not in root and not name.startswith("."):
                path = os.path.join(root, name)
                found[os.path.relpath(path, directory)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return tuple(sorted(found.items())) or None


def _cached_writer(made):
    """A model writer that copies the files of one real run (`made`, a file or a directory) to its path."""

    def write(encoder, path, *args):
        if os.path.isdir(made):
            shutil.copytree(made, path, dirs_exist_ok=True)
        else:
            shutil.copyfile(made, path)

    return write


def _token_id_export(tmp_path, name, export, previous_encoder, encoder, checked=True):
    def prepare(directory):
        export(previous_encoder, str(directory / "export"))
        return str(directory / "export")

    count = assert_every_crash_point(
        tmp_path, prepare, lambda out: export(encoder, out), _export_state, checked=lambda out: [out] if checked else []
    )
    assert_documented(name, count)


@pytest.fixture(scope="module")
def short_encoder(tiny_model_dir):
    """The tiny model with a query budget of 32: its exports' records differ from the tiny model's."""
    import gtr_keras

    return gtr_keras.load(tiny_model_dir, query_length=32)


def test_export_onnx(tiny_onnx_export, tiny_encoder, short_encoder, tmp_path, monkeypatch):
    from gtr_keras.exports import onnx_export

    monkeypatch.setattr(onnx_export, "write_onnx", _cached_writer(os.path.join(tiny_onnx_export, "encoder.onnx")))
    _token_id_export(tmp_path, "export `--format onnx`", onnx_export.export_onnx, short_encoder, tiny_encoder)


def test_export_openvino(tiny_encoder, short_encoder, tmp_path, monkeypatch):
    pytest.importorskip("openvino", reason="openvino is not installed (pip install 'gtr-keras[openvino]')")
    from gtr_keras.exports import openvino_export

    made = tmp_path / "made"
    made.mkdir()
    openvino_export.write_openvino(tiny_encoder, str(made / "encoder.xml"))

    def write(encoder, path):
        shutil.copyfile(made / "encoder.xml", path)
        shutil.copyfile(made / "encoder.bin", os.path.join(os.path.dirname(path), "encoder.bin"))

    monkeypatch.setattr(openvino_export, "write_openvino", write)
    _token_id_export(
        tmp_path / "runs", "export `--format openvino`", openvino_export.export_openvino, short_encoder, tiny_encoder
    )


def test_export_litert(tiny_encoder, tmp_path, monkeypatch):
    from gtr_keras.exports import litert

    flatbuffer = litert.litert_flatbuffer(tiny_encoder)
    monkeypatch.setattr(litert, "litert_flatbuffer", lambda encoder: flatbuffer + bytes([encoder.query_length]))
    count = assert_every_crash_point(
        tmp_path,
        lambda directory: (directory.mkdir(parents=True), str(directory / "export"))[1],
        lambda out: litert.export_litert(tiny_encoder, out),
        _export_state,
        checked=lambda out: [os.path.join(out, litert.LITERT_FILE)],
    )
    assert_documented("export `--format litert`", count)


def test_export_saved_model(tiny_encoder, short_encoder, tmp_path, monkeypatch):
    from gtr_keras.exports.savedmodel import export

    made = tmp_path / "made"
    made.mkdir()
    export._write_encoder(tiny_encoder, made)
    monkeypatch.setattr(
        export, "_write_encoder", lambda encoder, staging: shutil.copytree(made, staging, dirs_exist_ok=True)
    )

    def prepare(directory):
        export.export_encoder(short_encoder, str(directory / "export"), version=1)
        return str(directory / "export")

    count = assert_every_crash_point(
        tmp_path / "runs",
        prepare,
        lambda out: export.export_encoder(tiny_encoder, out, version=2),
        _export_state,
        checked=lambda out: [out],
    )
    assert_documented("export, SavedModel encoder (a new version)", count)


def test_an_update_killed_for_real_is_finished_by_a_rerun(templates, tiny_model_dir, tmp_path):
    new = tmp_path / "new.jsonl"
    new.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"wing {i}"}) + "\n" for i in range(3)))
    argv = lambda idx: ["update", idx, "--model", tiny_model_dir, "--corpus", str(new)]  # noqa: E731
    reference = _copy(templates / "built")(tmp_path / "reference")
    with counting() as log:
        assert main(argv(reference)) == 0
    after = _index_state(reference)
    points = sorted({log.count // 2, log.count - 1})  # the dense commit, and the BM25 side's
    for n in points:
        idx = _copy(templates / "built")(tmp_path / f"killed-{n}")
        before = _index_state(idx)
        result = killed_at(n, "-m", "gtr_keras", *argv(idx), timeout=300)
        assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
        assert _dense_new_bm25_stale_allowed(_index_state(idx), before, after)
        assert_nothing_damaged(idx, f"check after a kill at operation {n}")
        assert main(argv(idx)) == 0 and _index_state(idx) == after
        assert main(["check", idx]) == 0


def test_a_training_run_stopped_at_its_checkpoints_and_final_save_resumes_to_the_same_model(tiny_model_dir, tmp_path):
    """A checkpoint is one crash point (TensorFlow's `CheckpointManager` writes it, with temporary names and
    a rename of its own); the final model directory's commit is `save`'s, tried at every operation above:
    here the run is stopped at each checkpoint and at the first operation of the final save."""
    from training_inputs import final_weights, write_triples

    from gtr_keras.training import loop
    from gtr_keras.utils.file_operations import stopping_at

    data = {"source": write_triples(tmp_path / "t.jsonl", 16), "query_length": 16, "document_length": 32}
    base = dict(init=tiny_model_dir, steps=8, batch_size=4, checkpoint_every=4, seed=3, verbose=0, data=data)
    with counting() as log:
        loop.train({**base, "output_dir": str(tmp_path / "straight")})
    straight = final_weights(tmp_path / "straight")
    saves = [n for n, (_, path) in enumerate(log.operations, 1) if os.sep + "ckpt-" in path]
    model = [n for n, (_, path) in enumerate(log.operations, 1) if os.sep + "model" in path]
    stops = sorted({*saves, model[0]})
    assert len(saves) == 2
    for n in stops:
        run_dir = tmp_path / f"stopped-{n}"
        with stopping_at(n) as stopped:
            loop.train({**base, "output_dir": str(run_dir)})
        assert stopped.crashed
        if (run_dir / "model").exists():
            assert main(["check", str(run_dir / "model")]) == 0
        loop.train({**base, "output_dir": str(run_dir)})
        again = final_weights(run_dir)
        for name in straight:
            np.testing.assert_allclose(again[name], straight[name], atol=1e-5, rtol=0, err_msg=f"{name} after {n}")
