"""The Python door as safe as the command line: `Index` refuses every value `gtr-keras` refuses (one rule,
`readers.document_values`), naming the row and field, before anything is written; an index an older version
damaged with such an id is named with how to repair it, and that repair works."""

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

from gtr_keras.beir.readers import Corpus
from gtr_keras.cli.main import main
from gtr_keras.errors import DataError, UserError
from gtr_keras.retrieval import index, index_building, index_updates
from gtr_keras.retrieval.index import Index

TEXTS = ["wing lift at mach one", "boundary layer heat transfer", "shock on a cone", "panel flutter"]
# (what the corpus holds, the message's field and problem): every value a corpus file's record can hold too.
MALFORMED = [
    ({"_id": "has space"}, "`_id` 'has space' holds whitespace, which TREC run files"),
    ({"_id": "tab\there"}, "`_id` 'tab\\there' holds whitespace"),
    ({"_id": "no\u00a0break"}, "`_id` 'no\\xa0break' holds whitespace"),
    ({"_id": None}, "missing field `_id`"),
    ({"_id": True}, "field `_id` must be a string or an integer, got bool"),
    ({"_id": ""}, "`_id` '' is empty"),
    ({"_id": "a\0b"}, "`_id` 'a\\x00b' holds a NUL character"),
    ({"_id": "d\ud800"}, "`_id` 'd\\ud800' holds a lone surrogate (U+D800 at character 1), which UTF-8 cannot"),
    ({"text": None}, "missing field `text`"),
    ({"text": 5}, "field `text` must be a string, got int"),
    ({"text": "lift \udcff"}, "field `text`: a lone surrogate (U+DCFF at character 5), which UTF-8 cannot encode"),
    ({"title": 3}, "field `title` must be a string, got int"),
    ({"title": "\udfff"}, "field `title`: a lone surrogate (U+DFFF at character 0)"),
    ({"metadata": "meta"}, "field `metadata` must be an object, got str"),
    ({"metadata": {"lang": "e\ud800"}}, "document 'n0' field `metadata.lang`: a lone surrogate (U+D800 at"),
    ({"metadata": {"tags": ["x", "\ud800"]}}, "document 'n0' field `metadata.tags`: a lone surrogate"),
    ({"metadata": {"l\ud800": "en"}}, "document 'n0': `metadata` field name 'l\\ud800': a lone surrogate"),
    ({"metadata": {"year": float("nan")}}, "document 'n0' field `metadata.year` is a number that does not fit a"),
]


def _snapshot(directory):
    """SHA-256 of every file under `directory` (and the names beside it), by path."""
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return found, sorted(os.listdir(os.path.dirname(directory)))


def _good_corpus():
    metadata = [{"year": 2000 + i, "lang": "en"} for i in range(len(TEXTS))]
    return Corpus([f"d{i}" for i in range(len(TEXTS))], [f"title {i}" for i in range(len(TEXTS))], TEXTS, metadata)


@pytest.fixture(scope="module")
def good_index(tmp_path_factory, tiny_model_dir):
    path = str(tmp_path_factory.mktemp("good") / "idx")
    Index.build(path, _good_corpus(), tiny_model_dir, exact=True)
    return path


@pytest.fixture
def index_copy(good_index, tmp_path):
    path = str(tmp_path / "indexes" / "idx")
    shutil.copytree(good_index, path)
    return path


def _record(change):
    record = {"_id": "n0", "title": "", "text": "nozzle jet", "metadata": {"year": 2020}}
    record.update(change)
    return record


def _corpus(records):
    metadata = [record["metadata"] for record in records]
    return Corpus([r["_id"] for r in records], [r["title"] for r in records], [r["text"] for r in records], metadata)


def _not_loaded():
    pytest.fail("the model loaded before the inputs were checked")


@pytest.mark.parametrize("change, problem", MALFORMED)
def test_a_value_the_command_line_refuses_is_refused_by_index_add_build_and_update_naming_row_and_field(
    index_copy, tiny_model_dir, tmp_path, capsys, change, problem
):
    before = _snapshot(index_copy)
    records = [_record({"_id": "ok"}), _record(change)]
    opened = Index.open(index_copy, model=_not_loaded)
    for attempt in (
        lambda: opened.add(_corpus(records)),
        lambda: opened.update(add=_corpus(records), delete=["d0"]),
        lambda: Index.build(index_copy, _corpus(records), model=_not_loaded),
    ):
        with pytest.raises(UserError) as refused:
            attempt()
        assert str(refused.value).startswith(f"Corpus row 1: {problem}")
        assert _snapshot(index_copy) == before
    assert Index.open(index_copy).search(["lift"], k=2)[0][0]["id"] == "d0"

    corpus_file = tmp_path / "new.jsonl"  # the same record in a corpus file: the same words, with its line
    corpus_file.write_text("".join(json.dumps(record) + "\n" for record in records))  # NaN, "\\ud800" and "\\u0000" too
    capsys.readouterr()
    assert main(["update", index_copy, "--corpus", str(corpus_file), "--model", tiny_model_dir]) == 2
    assert f"error: {corpus_file}:2: {problem}" in capsys.readouterr().err
    assert _snapshot(index_copy) == before


def test_a_metadata_type_other_than_the_indexs_is_refused_naming_the_row(index_copy, tiny_model_dir, tmp_path, capsys):
    before = _snapshot(index_copy)
    problem = "document 'n0' field `metadata.year` is a string, but the index's document 'd0' has a number"
    with pytest.raises(DataError, match=f"^Corpus row 0: {problem}"):
        Index.open(index_copy, model=_not_loaded).add(Corpus(["n0"], [""], ["x"], [{"year": "new"}]))
    (tmp_path / "new.jsonl").write_text(json.dumps({"_id": "n0", "text": "x", "metadata": {"year": "new"}}) + "\n")
    capsys.readouterr()
    assert main(["update", index_copy, "--corpus", str(tmp_path / "new.jsonl"), "--model", tiny_model_dir]) == 2
    assert f"error: {tmp_path / 'new.jsonl'}:1: {problem}" in capsys.readouterr().err
    assert _snapshot(index_copy) == before


def test_a_corpus_given_in_python_is_held_to_the_columns_and_unique_ids(index_copy):
    before = _snapshot(index_copy)
    opened = Index.open(index_copy, model=_not_loaded)
    with pytest.raises(DataError, match=r"^Corpus: 1 duplicate `_id` value\(s\), e.g. 'n1' \(rows 0 and 2\)$"):
        opened.add(Corpus(["n1", "n2", "n1"], ["", "", ""], ["a", "b", "c"]))
    with pytest.raises(UserError, match=r"^Corpus: 2 ids, 1 titles, 2 texts; one of each per document$"):
        opened.add(Corpus(["n1", "n2"], [""], ["a", "b"]))
    with pytest.raises(UserError, match=r"^Corpus.texts must be a list \(an item per document\), got str$"):
        opened.add(Corpus(["n1"], [""], "a"))
    with pytest.raises(UserError, match=r"^a corpus is a gtr_keras.Corpus \(or a corpus file\), got list$"):
        opened.add([{"_id": "n1", "text": "a"}])
    assert _snapshot(index_copy) == before


def test_an_integer_id_and_a_missing_title_are_taken_as_a_corpus_file_takes_them(index_copy, tiny_model_dir):
    opened = Index.open(index_copy, tiny_model_dir)
    opened.add(Corpus([7], [None], ["nozzle jet"], [{"year": 1990}]))
    hit = opened.search(["nozzle jet"], k=1, filter="year < 1999")[0][0]
    assert (hit["id"], hit["title"], hit["text"]) == ("7", "", "nozzle jet")


@pytest.mark.parametrize(
    "search, where",
    [
        ({"queries": ["lift", "wing \ud800"]}, r"queries\[1\]: a lone surrogate \(U\+D800 at character 5\)"),
        ({"queries": ["\udcff"], "retriever": "hybrid"}, r"queries\[0\]: a lone surrogate"),
        ({"queries": ["\udcff"], "retriever": "bm25"}, r"queries\[0\]: a lone surrogate"),
        ({"queries": ["lift \ud800"], "rerank": _not_loaded}, r"queries\[0\]: a lone surrogate"),
        ({"queries": ["lift"], "filter": "lang = \ud800"}, r"filter 'lang = \\ud800': a lone surrogate"),
        ({"queries": ["lift"], "filter": ["year > 1", "lang in (en, '\udcff')"]}, r"filter \"lang in .*: a lone"),
    ],
)
def test_a_lone_surrogate_in_a_search_is_refused_before_the_model_loads(index_copy, search, where):
    with pytest.raises(UserError, match=f"^{where}"):
        Index.open(index_copy, model=_not_loaded).search(**search)


def test_a_lone_surrogate_in_the_ids_to_delete_is_refused_and_the_index_is_unchanged(index_copy, tmp_path):
    before = _snapshot(index_copy)
    opened = Index.open(index_copy)
    with pytest.raises(UserError, match=r"^delete: id '\\ud800' holds a lone surrogate \(U\+D800 at character 0\)"):
        opened.delete("\ud800")
    with pytest.raises(UserError, match=r"^delete\[1\]: id 'd\\udcff' holds a lone surrogate"):
        opened.delete(["d0", "d\udcff"])
    with pytest.raises(UserError, match=r"^delete\[0\]: id '' is empty"):
        opened.update(delete=[""])
    assert _snapshot(index_copy) == before and len(Index.open(index_copy)) == len(TEXTS)


def _damage(how, path, model_dir, monkeypatch):
    """The index an older version left: a document whose id holds whitespace, stored unchecked (this version's
    check bypassed), after an `add` (committed, its BM25 side left stale by the failed rebuild) or a `build`."""
    for module in (index, index_building, index_updates):
        monkeypatch.setattr(module, "check_corpus", lambda corpus: corpus)
    if how == "add":

        def failed(*args):
            raise RuntimeError("the older version's rebuild of the BM25 side failed on the id")

        monkeypatch.setattr(index_updates, "rebuild_bm25_side", failed)
        with pytest.raises(RuntimeError):
            Index.open(path, model_dir).add(Corpus(["has space"], [""], ["nozzle jet"], [{"year": 1990}]))
        return os.path.join(path, "index", "segment-000001", "documents.jsonl.gz"), "has space"
    with pytest.raises(DataError):  # it wrote the index, which then did not open
        Index.build(
            path, Corpus(["with space", *_good_corpus().ids], ["", *_good_corpus().titles], ["x", *TEXTS]), model_dir
        )
    return os.path.join(path, "documents.jsonl.gz"), "with space"


@pytest.mark.parametrize("how", ["add", "build"])
def test_an_index_an_older_version_damaged_is_named_with_its_repair_and_update_delete_repairs_it(
    good_index, index_copy, tiny_model_dir, tmp_path, capsys, monkeypatch, how
):
    with monkeypatch.context() as older:
        documents, bad = _damage(how, index_copy, tiny_model_dir, older)
    named = (
        f"{documents}:1: document id {bad!r} holds whitespace, which TREC run files (and so evaluation) cannot keep: "
        f"an older gtr-keras stored such ids unchecked from Python; delete them (`gtr-keras update {index_copy} "
        f"--delete FILE`, FILE holding the ids one a line"
    )
    with pytest.raises(DataError) as refused:
        Index.open(index_copy)
    assert str(refused.value).startswith(named) and str(refused.value).endswith(
        "or rebuild the index from a corrected corpus"
    )
    capsys.readouterr()
    assert main(["check", index_copy]) == 2
    assert named in "".join(capsys.readouterr())
    assert main(["search", "--index", index_copy, "--model", tiny_model_dir, "lift"]) == 2
    assert named in capsys.readouterr().err
    assert main(["update", index_copy, "--compact"]) == 0  # updates read such documents as stored
    with pytest.raises(DataError, match=f"documents.jsonl.gz:[0-9]+: document id {bad!r} holds whitespace"):
        Index.open(index_copy)  # kept by the compaction, in its new segment

    (tmp_path / "bad.txt").write_text(f"{bad}\n")
    assert main(["update", index_copy, "--delete", str(tmp_path / "bad.txt")]) == 0
    repaired, good = Index.open(index_copy), Index.open(good_index)
    assert sorted(repaired.ids) == sorted(good.ids)
    for retriever in ("gtr", "hybrid", "bm25"):
        found, expected = (i.search(TEXTS[:2], k=3, retriever=retriever) for i in (repaired, good))
        assert [[h["id"] for h in row] for row in found] == [[h["id"] for h in row] for row in expected]
        scores = [[h["score"] for h in row] for row in found]
        np.testing.assert_allclose(scores, [[h["score"] for h in row] for row in expected], atol=1e-5)
    capsys.readouterr()
    assert main(["check", index_copy]) == 0, capsys.readouterr()
