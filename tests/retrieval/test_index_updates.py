"""`update_index` and `gtr-keras update`: index directories updated in place, checked as builds are."""

import dataclasses
import json

import numpy as np
import pytest
from search_inputs import assert_same_results, clustered

from gtr_keras.beir.readers import Corpus
from gtr_keras.cli.main import main
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.retrieval.index import Index
from gtr_keras.retrieval.index_building import build_index, index_metadata
from gtr_keras.retrieval.index_types import IndexUpdate
from gtr_keras.retrieval.index_updates import update_index
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.storage.layout import read_id_file
from gtr_keras.storage.search_index import SearchIndex
from gtr_keras.utils import files

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()


def _corpus(ids, seed=0):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 30))) for _ in ids]
    return Corpus(list(ids), [f"title {i}" for i in ids], texts)


def _embedding_file(path, ids, vectors, model=None):
    """An embedding file in `gtr-keras encode`'s format (with its model record when `model` is given)."""
    np.save(path, vectors)
    path.with_suffix(".ids.txt").write_text("".join(f"{i}\n" for i in ids))
    if model is not None:
        record = {"model": model, "kind": "document", "num_rows": len(ids)}
        path.with_suffix(".json").write_text(json.dumps(record))


def _unit(n, dims):
    x = np.random.default_rng(n).standard_normal((n, dims))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")


def test_an_updated_corpus_index_searches_and_shows_the_new_documents(tmp_path, tiny_encoder, tiny_model_dir):
    corpus = _corpus([f"d{i}" for i in range(40)])
    build_index(tiny_encoder, corpus, tmp_path / "idx", model_dir=tiny_model_dir)
    before = Retriever.load(tmp_path / "idx", tiny_encoder)
    new = _corpus(["d3", "n1"], seed=1)
    (tmp_path / "gone.txt").write_text("d5\n\nd6\n")
    update_index(tmp_path / "idx", corpus=new, encoder=tiny_encoder, delete=tmp_path / "gone.txt")
    after = Retriever.load(tmp_path / "idx", tiny_encoder)
    hits = after.search([new.texts[0], new.texts[1]], k=45)
    assert {h["id"] for h in hits[0]} == {f"d{i}" for i in range(40)} - {"d5", "d6"} | {"n1"}
    shown = {h["id"]: h for row in hits for h in row}
    assert shown["d3"]["text"] == new.texts[0] and shown["n1"]["title"] == "title n1"
    assert shown["d7"]["text"] == corpus.texts[7]
    assert len(after.corpus) == 39 and len(before.corpus) == 40  # the loaded version keeps its documents
    update_index(tmp_path / "idx", compact=True)
    compacted = Retriever.load(tmp_path / "idx", tiny_encoder)
    assert_same_results(compacted.search([new.texts[0]], k=45), after.search([new.texts[0]], k=45))


def test_embeddings_of_another_model_are_refused_before_any_index_work(tmp_path, tiny_encoder):
    model = index_metadata(tiny_encoder, None)
    (tmp_path / "emb").mkdir()
    dims = model["embedding_dim"]
    _embedding_file(tmp_path / "emb" / "a.npy", ["a", "b"], _unit(2, dims), model)
    assert main(["index", "--embeddings", str(tmp_path / "emb" / "a.npy"), "--out", str(tmp_path / "idx")]) == 0
    (tmp_path / "new").mkdir()
    _embedding_file(tmp_path / "new" / "n.npy", ["c"], _unit(1, dims), {**model, "model_sha256": "f" * 64})
    with pytest.raises(MismatchError, match=r"n.npy: encoded by another model than the index .*model_sha256"):
        update_index(tmp_path / "idx", embeddings=str(tmp_path / "new" / "*.npy"))
    assert SearchIndex.load(tmp_path / "idx").ids == ["a", "b"]


def test_cli_update_with_embeddings_and_deletions(tmp_path, capsys):
    (tmp_path / "emb").mkdir()
    _embedding_file(tmp_path / "emb" / "a.npy", [f"d{i}" for i in range(30)], clustered(30, seed=1))
    out = str(tmp_path / "idx")
    assert main(["index", "--embeddings", str(tmp_path / "emb" / "*.npy"), "--out", out]) == 0
    (tmp_path / "new").mkdir()
    _embedding_file(tmp_path / "new" / "n.npy", ["d1", "x1"], clustered(2, seed=2))
    (tmp_path / "ids.txt").write_text("d2\nd3\n")
    update = ["update", out, "--embeddings", str(tmp_path / "new" / "*.npy")]
    assert main([*update, "--delete", str(tmp_path / "ids.txt")]) == 0
    assert "updated" in capsys.readouterr().out
    index = SearchIndex.load(out)
    assert len(index.ids) == 29 and {"d2", "d3"}.isdisjoint(index.ids) and "x1" in set(index.ids)
    (tmp_path / "ids.txt").write_text("d4\nnope\n")
    assert main(["update", out, "--delete", str(tmp_path / "ids.txt")]) == 2
    assert f"{tmp_path / 'ids.txt'}:2: id 'nope' is not in the index" in capsys.readouterr().err
    assert main(["update", out, "--delete", str(tmp_path / "ids.txt"), "--missing-ok"]) == 0
    assert len(SearchIndex.load(out).ids) == 28
    with files.open("ram://test_cli_update/ids.txt", "w") as f:
        f.write("d5\n")
    assert main(["update", out, "--delete", "ram://test_cli_update/ids.txt"]) == 0  # the scheme kept
    assert len(SearchIndex.load(out).ids) == 27 and "d5" not in set(SearchIndex.load(out).ids)


def test_an_id_file_names_the_line_of_a_bad_id(tmp_path):
    (tmp_path / "ids.txt").write_text("a\nb c\n")  # a line is one id: one that an older version stored can be deleted
    assert read_id_file(tmp_path / "ids.txt")[0] == ["a", "b c"]
    (tmp_path / "ids.txt").write_text("a\nb\0c\n")
    with pytest.raises(DataError, match=r"^\S*ids.txt:2: id 'b\\x00c' holds a NUL character"):
        read_id_file(tmp_path / "ids.txt")
    (tmp_path / "ids.txt").write_text("a\n\nb\na\n")
    with pytest.raises(DataError, match=r"^\S*ids.txt:4: id 'a' duplicates .*ids.txt:1"):
        read_id_file(tmp_path / "ids.txt")


def test_cli_update_checks_the_index_and_the_ids_before_the_model_loads(tmp_path, capsys, monkeypatch, tiny_model_dir):
    from gtr_keras.cli.helpers import handler_inputs

    monkeypatch.setattr(handler_inputs, "encoder", lambda args: pytest.fail("the model loaded before the checks"))
    (tmp_path / "ids.txt").write_text("d1\nnope\n")
    (tmp_path / "not-an-index").mkdir()
    update = ["--delete", str(tmp_path / "ids.txt")]
    with pytest.raises(SystemExit) as exit_:
        main(["update", str(tmp_path / "not-an-index"), *update])
    assert exit_.value.code == 2 and "not an index directory (no retriever.json)" in capsys.readouterr().err
    (tmp_path / "emb").mkdir()
    _embedding_file(tmp_path / "emb" / "a.npy", ["d0", "d1"], clustered(2, seed=1))
    assert main(["index", "--embeddings", str(tmp_path / "emb" / "a.npy"), "--out", str(tmp_path / "idx")]) == 0
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d0", "text": "wing"}) + "\n")
    argv = ["update", str(tmp_path / "idx"), *update, "--model", tiny_model_dir, "--corpus", str(corpus)]
    assert main(argv) == 2
    assert f"{tmp_path / 'ids.txt'}:2: id 'nope' is not in the index" in capsys.readouterr().err


def _counting(monkeypatch, module, name):
    """Counts the calls of `module.name` (still calling it)."""
    calls = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.parametrize(
    "flags, message",
    [
        ([], "gtr-keras update: error: needs --embeddings, --corpus (with --model), --delete or --compact"),
        (["--compact", "--missing-ok"], "argument --missing-ok: goes with --delete"),
        (["--corpus", "IDS"], "argument --model: required with --corpus"),
        (["--corpus", "IDS", "--embeddings", "IDS", "--model", "m"], "--corpus (with --model) or --embeddings"),
        (["--exact"], "unrecognized arguments: --exact"),
    ],
)
def test_the_update_commands_flags_are_checked_first(tmp_path, capsys, flags, message):
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "retriever.json").write_text("{}")
    (tmp_path / "IDS").write_text("a\n")
    flags = [str(tmp_path / f) if f == "IDS" else f for f in flags]
    with pytest.raises(SystemExit) as exit_:
        main(["update", str(tmp_path / "idx"), *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_an_update_reads_the_index_state_and_the_ids_file_once(tmp_path, tiny_encoder, tiny_model_dir, monkeypatch):
    from gtr_keras.retrieval import index_updates
    from gtr_keras.storage import layout, segment_writer

    build_index(tiny_encoder, _corpus([f"d{i}" for i in range(20)]), tmp_path / "idx", model_dir=tiny_model_dir)
    states = _counting(monkeypatch, segment_writer.IndexState, "__init__")
    id_files = _counting(monkeypatch, index_updates, "read_id_file")
    records = _counting(monkeypatch, layout, "read_json_object")
    (tmp_path / "gone.txt").write_text("d5\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "n1", "text": "wing lift"}) + "\n")
    argv = ["update", str(tmp_path / "idx"), "--model", tiny_model_dir, "--corpus", str(corpus)]
    assert main([*argv, "--delete", str(tmp_path / "gone.txt")]) == 0
    model_records = [path for path, *_ in records if str(path).endswith("retriever.json")]
    assert (len(states), len(id_files), len(model_records)) == (1, 1, 1)
    assert "n1" in set(SearchIndex.load(str(tmp_path / "idx")).ids)


def test_a_compaction_alone_keeps_the_bm25_side(tmp_path, tiny_encoder, tiny_model_dir, monkeypatch):
    from gtr_keras.retrieval import index_updates

    build_index(tiny_encoder, _corpus([f"d{i}" for i in range(20)]), tmp_path / "idx", model_dir=tiny_model_dir)
    update_index(tmp_path / "idx", delete=["d3"], compact=False)
    rebuilds = _counting(monkeypatch, index_updates, "rebuild_bm25_side")
    assert main(["update", str(tmp_path / "idx"), "--compact"]) == 0
    assert rebuilds == []
    assert len(SearchIndex.load(str(tmp_path / "idx")).ids) == 19
    hits = Retriever.load(tmp_path / "idx", tiny_encoder).search(["wing"], k=3)  # the kept side still matches
    assert len(hits[0]) == 3
    update_index(tmp_path / "idx", delete=["d4"])
    assert len(rebuilds) == 1


def test_delete_is_one_id_as_a_str_ids_as_a_list_and_a_file_of_ids_as_a_path_like(tmp_path):
    _embedding_file(tmp_path / "base.npy", ["d1", "d2", "d3", "d4", "gone.txt"], _unit(5, 8))
    Index.build(tmp_path / "idx", embeddings=str(tmp_path / "base.npy"))
    (tmp_path / "gone.txt").write_text("d1\n")
    assert update_index(tmp_path / "idx", delete="gone.txt").deleted == ("gone.txt",)  # one id, never a file
    with pytest.raises(DataError, match="^delete\\[0\\]: id 'd1 d4' is not in the index"):
        update_index(tmp_path / "idx", delete="d1 d4")  # one id, never its words
    assert update_index(tmp_path / "idx", delete=iter(["d2"])).deleted == ("d2",)
    with files.open("ram://test_index_updates/ids.txt", "w") as f:
        f.write("d3\nd9\n")
    with pytest.raises(DataError, match="^ram://test_index_updates/ids.txt:2: id 'd9' is not in the index"):
        update_index(tmp_path / "idx", delete=files.FilePath("ram://test_index_updates/ids.txt"))
    change = update_index(tmp_path / "idx", delete=files.FilePath("ram://test_index_updates/ids.txt"), missing_ok=True)
    assert change.deleted == ("d3",) and change.documents == 2
    with pytest.raises(UserError, match="delete must be an id .* or a list of ids, got bytes"):
        update_index(tmp_path / "idx", delete=b"d1")


def test_an_update_returns_the_ids_it_added_replaced_and_deleted_in_the_order_given(tmp_path):
    _embedding_file(tmp_path / "base.npy", [f"d{i}" for i in range(20)], _unit(20, 8))
    Index.build(tmp_path / "idx", embeddings=str(tmp_path / "base.npy"))
    _embedding_file(tmp_path / "new.npy", ["n1", "d2", "n0"], _unit(3, 8))
    update = {"embeddings": str(tmp_path / "new.npy"), "delete": ["zz", "d7"], "missing_ok": True}
    change = update_index(tmp_path / "idx", **update)
    assert change == IndexUpdate(("n1", "n0"), ("d2",), ("d7",), generation=1, documents=21, segments=2)
    assert update_index(tmp_path / "idx", **update) == IndexUpdate((), (), (), 1, 21, 2)  # a rerun changes nothing
    assert update_index(tmp_path / "idx", compact=True) == IndexUpdate((), (), (), 2, 21, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        change.added = ()
