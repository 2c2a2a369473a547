"""Acceptance of filtered search on the command line (`search --filter`, `--ids-file`): an index built with
`gtr-keras index --model M --corpus C --out I` from a corpus whose lines carry `metadata`, searched by GTR,
BM25 and both fused, against brute force over the matching documents."""

import json

import numpy as np
import pytest

from gtr_keras.beir.readers import Corpus
from gtr_keras.cli.main import main
from gtr_keras.lexical.bm25 import BM25Retriever
from gtr_keras.lexical.fusion import model_fusion
from gtr_keras.retrieval.passages import split_row_id, window_corpus

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
QUERY = "boundary layer heat transfer"
K = 5


def _documents(n=40):
    documents = []
    for i in range(n):
        text = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + i % 5))
        metadata = {"lang": ["en", "de", "fr"][i % 3], "year": 2000 + i % 10, "tags": [WORDS[i % 4], WORDS[i % 6]]}
        documents.append({"_id": f"d{i}", "title": f"title {i}", "text": text, "metadata": metadata})
    return documents


def _write(path, documents):
    path.write_text("".join(json.dumps(document) + "\n" for document in documents))
    return path


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("filters")
    corpus = _write(root / "corpus.jsonl", _documents())
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(root / "idx")]) == 0
    return root / "idx", _documents()


def _search(capsys, index, model_dir, *argv):
    capsys.readouterr()
    assert main(["search", "--index", str(index), "--model", model_dir, "--json", "-k", str(K), *argv, QUERY]) == 0
    return [(hit["id"], hit["score"]) for hit in json.loads(capsys.readouterr().out)[0]["hits"]]


def _gtr_truth(encoder, documents, matching, ids=None):
    kept = [d for d in documents if matching(d["metadata"]) and (ids is None or d["_id"] in ids)]
    vectors = encoder.encode_documents([f"{d['title']} {d['text']}" for d in kept])
    scores = vectors @ encoder.encode_queries([QUERY])[0]
    return {kept[i]["_id"]: float(scores[i]) for i in range(len(kept))}


def _bm25_truth(documents, matching):
    bm25 = BM25Retriever()
    bm25.index([f"{d['title']} {d['text']}" for d in documents], [d["_id"] for d in documents])
    ids, scores = bm25.search([QUERY], len(documents))
    allowed = {d["_id"] for d in documents if matching(d["metadata"])}
    return {i: s for i, s in zip(ids[0], scores[0]) if i in allowed}


def _top(scores, k=K):
    return sorted(scores.items(), key=lambda item: -item[1])[:k]


FILTERS = [
    (["lang = de"], lambda m: m["lang"] == "de"),
    (["year >= 2007"], lambda m: m["year"] >= 2007),
    (["lang in (en, fr)", "year < 2004"], lambda m: m["lang"] in ("en", "fr") and m["year"] < 2004),
    (["tags = heat"], lambda m: "heat" in m["tags"]),
    (["lang != en", "tags in (wing, lift)"], lambda m: m["lang"] != "en" and {"wing", "lift"} & set(m["tags"])),
]


@pytest.mark.parametrize("expressions, matching", FILTERS)
def test_gtr_search_with_filters_is_brute_force_over_the_matching_documents(
    indexed, expressions, matching, tiny_model_dir, tiny_encoder, capsys
):
    index, documents = indexed
    argv = [arg for expression in expressions for arg in ("--filter", expression)]
    hits = _search(capsys, index, tiny_model_dir, *argv)
    expected = _top(_gtr_truth(tiny_encoder, documents, matching))
    assert [i for i, _ in hits] == [i for i, _ in expected]
    np.testing.assert_allclose([s for _, s in hits], [s for _, s in expected], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("expressions, matching", FILTERS[:3])
def test_bm25_and_hybrid_search_rank_within_the_filter(
    indexed, expressions, matching, tiny_model_dir, tiny_encoder, capsys
):
    index, documents = indexed
    argv = [arg for expression in expressions for arg in ("--filter", expression)]
    bm25 = _bm25_truth(documents, matching)
    hits = _search(capsys, index, tiny_model_dir, "--retriever", "bm25", *argv)
    assert [i for i, _ in hits] == [i for i, _ in _top(bm25)]
    fused = model_fusion(tiny_model_dir).fuse(_gtr_truth(tiny_encoder, documents, matching), bm25)
    hits = _search(capsys, index, tiny_model_dir, "--retriever", "hybrid", *argv)
    assert [i for i, _ in hits] == list(fused)[:K]
    np.testing.assert_allclose([s for _, s in hits], list(fused.values())[:K], rtol=1e-5, atol=1e-6)


def test_an_ids_file_allows_only_its_documents(indexed, tmp_path, tiny_model_dir, tiny_encoder, capsys):
    index, documents = indexed
    (tmp_path / "ids.txt").write_text("d1\nd4\nd7\nd30\n")
    hits = _search(capsys, index, tiny_model_dir, "--ids-file", str(tmp_path / "ids.txt"), "--filter", "year < 2005")
    expected = _top(_gtr_truth(tiny_encoder, documents, lambda m: m["year"] < 2005, {"d1", "d4", "d7", "d30"}))
    assert [i for i, _ in hits] == [i for i, _ in expected] and {i for i, _ in hits} == {"d1", "d4", "d30"}


@pytest.mark.parametrize("retriever", ["gtr", "bm25", "hybrid"])
def test_an_ids_file_allows_the_documents_of_a_passages_index(
    tmp_path, tiny_model_dir, tiny_encoder, retriever, capsys
):
    documents = [{**d, "text": " ".join([d["text"]] * 4)} for d in _documents(12)]
    corpus = _write(tmp_path / "corpus.jsonl", documents)
    argv = ["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(tmp_path / "idx")]
    assert main([*argv, "--passages", "8:4"]) == 0
    (tmp_path / "ids.txt").write_text("d1\nd4\nd7\nd9\n")
    hits = _search(
        capsys,
        tmp_path / "idx",
        tiny_model_dir,
        "--ids-file",
        str(tmp_path / "ids.txt"),
        "-k",
        "3",
        "--retriever",
        retriever,
    )
    ids, titles, texts = zip(*((d["_id"], d["title"], d["text"]) for d in documents))
    rows, _ = window_corpus(Corpus(list(ids), list(titles), list(texts)), tiny_encoder, "8:4")
    assert len(rows) > 2 * len(documents)
    if retriever == "gtr":
        scores = tiny_encoder.encode_documents(rows.joined()) @ tiny_encoder.encode_queries([QUERY])[0]
        best = {
            d: max(s for r, s in zip(rows.ids, scores) if split_row_id(r)[0] == d) for d in ("d1", "d4", "d7", "d9")
        }
        expected = _top(best, 3)
        assert [i for i, _ in hits] == [i for i, _ in expected]
        np.testing.assert_allclose([s for _, s in hits], [s for _, s in expected], rtol=1e-5, atol=1e-6)
    else:
        assert len(hits) == 3 and {i for i, _ in hits} <= {"d1", "d4", "d7", "d9"}


def test_a_filter_matching_fewer_than_k_documents_returns_those(indexed, tiny_model_dir, capsys):
    index, _ = indexed
    hits = _search(capsys, index, tiny_model_dir, "--filter", "year = 2003", "--filter", "lang = en")
    assert sorted(i for i, _ in hits) == ["d3", "d33"]


@pytest.mark.parametrize(
    "expression, message",
    [
        ("genre = x", "unknown field 'genre'"),
        ("lang >= 3", ">= compares numbers, 'lang' is a string"),
        ("year = recent", "'recent' is a string, 'year' holds number"),
        ("year >>= 3", "expected a value, got '>='"),
        ("year = 'open", "cannot parse from"),
    ],
)
def test_bad_filters_are_exit_2_in_one_line_naming_them(indexed, expression, message, tiny_model_dir, capsys):
    index, _ = indexed
    capsys.readouterr()
    assert main(["search", "--index", str(index), "--model", tiny_model_dir, "--filter", expression, QUERY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and repr(expression) in err, err


def test_a_field_of_mixed_types_is_refused_at_build_time_naming_document_and_field(tmp_path, tiny_model_dir, capsys):
    documents = _documents(4)
    documents[2]["metadata"]["year"] = "2002"
    corpus = _write(tmp_path / "corpus.jsonl", documents)
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{corpus}:3: document 'd2' field `metadata.year` is a string" in err, err
    assert not (tmp_path / "idx").exists()


def test_a_metadata_number_past_a_float64_is_refused_at_build_and_update_before_the_model_loads(
    indexed, tmp_path, tiny_model_dir, monkeypatch, capsys
):
    from gtr_keras.cli.helpers import handler_inputs

    monkeypatch.setattr(
        handler_inputs, "encoder", lambda args: pytest.fail("the model loaded before the corpus was read")
    )
    lines = [json.dumps(d) for d in _documents(3)]
    lines[2] = lines[2].replace('"year": 2002', '"year": 1' + "0" * 400)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(tmp_path / "idx")]) == 2
    message = "document 'd2' field `metadata.year` is a number that does not fit a float64"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{corpus}:3: {message}" in err, err
    assert not (tmp_path / "idx").exists()
    index, _ = indexed
    assert _update(index, tiny_model_dir, corpus) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{corpus}:3: {message}" in err, err


@pytest.mark.parametrize("expression", ["year < 1" + "0" * 400, "year > -" + "9" * 5000, "year != 1e400"])
def test_a_filter_number_past_a_float64_compares_as_infinity(indexed, tiny_model_dir, capsys, expression):
    index, _ = indexed
    assert len(_search(capsys, index, tiny_model_dir, "--filter", expression, "--filter", "lang = en")) == K


def test_a_stored_number_past_a_float64_is_exit_2_naming_the_documents_file_never_a_crash(
    tmp_path, tiny_model_dir, capsys
):
    import gzip
    import shutil

    from gtr_keras.storage.layout import DOCUMENTS_FILE

    corpus = _write(tmp_path / "corpus.jsonl", _documents(4))
    index = tmp_path / "idx"
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(index), "--no-bm25"]) == 0
    (stored,) = [path for path in index.rglob(DOCUMENTS_FILE)]
    with gzip.open(stored, "rt") as f:
        lines = f.read().replace('"year": 2001', '"year": 1' + "0" * 400)
    with gzip.open(tmp_path / "written.gz", "wt") as f:  # a document stored before numbers were checked
        f.write(lines)
    shutil.copyfile(tmp_path / "written.gz", stored)
    capsys.readouterr()
    for expression in ("year > 2000", "lang = en"):
        assert main(["search", "--index", str(index), "--model", tiny_model_dir, "--filter", expression, QUERY]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{stored}:2: document 'd1' field `metadata.year`" in err, err


def _update(index, model_dir, corpus, *flags):
    return main(["update", str(index), "--model", model_dir, "--corpus", str(corpus), *flags])


def test_metadata_of_embeddings_and_of_updates_follows_the_documents(tmp_path, tiny_model_dir, capsys):
    documents = _documents(12)
    corpus = _write(tmp_path / "corpus.jsonl", documents)
    embeddings = tmp_path / "emb.npy"
    assert main(["encode", "--model", tiny_model_dir, "--input", str(corpus), "--output", str(embeddings)]) == 0
    index = tmp_path / "idx"
    argv = ["index", "--embeddings", str(embeddings), "--metadata-corpus", str(corpus), "--out", str(index)]
    assert main(argv) == 0

    def ids(expression):
        return sorted(i for i, _ in _search(capsys, index, tiny_model_dir, "-k", "20", "--filter", expression))

    assert ids("lang = de") == ["d1", "d10", "d4", "d7"]
    changed = dict(documents[4], metadata={"lang": "fr", "year": 2030, "tags": []})
    _write(tmp_path / "new.jsonl", [changed])
    (tmp_path / "gone.txt").write_text("d7\n")
    assert _update(index, tiny_model_dir, tmp_path / "new.jsonl", "--delete", str(tmp_path / "gone.txt")) == 0
    assert ids("lang = de") == ["d1", "d10"] and ids("year >= 2030") == ["d4"]
    assert main(["update", str(index), "--compact"]) == 0
    assert ids("lang = de") == ["d1", "d10"] and ids("year >= 2030") == ["d4"]


def test_embeddings_with_their_metadata_corpus_and_no_bm25_store_the_metadata_only(tmp_path, tiny_model_dir, capsys):
    from gtr_keras.lexical.bm25_side import has_bm25_side

    corpus = _write(tmp_path / "corpus.jsonl", _documents(12))
    embeddings = tmp_path / "emb.npy"
    assert main(["encode", "--model", tiny_model_dir, "--input", str(corpus), "--output", str(embeddings)]) == 0
    index = tmp_path / "idx"
    argv = ["index", "--embeddings", str(embeddings), "--metadata-corpus", str(corpus), "--no-bm25", "--out"]
    assert main([*argv, str(index)]) == 0
    assert not has_bm25_side(index) and "no BM25 side" in capsys.readouterr().out
    hits = _search(capsys, index, tiny_model_dir, "-k", "20", "--filter", "lang = de")
    assert sorted(i for i, _ in hits) == ["d1", "d10", "d4", "d7"]


def test_an_update_whose_metadata_type_differs_from_the_index_is_refused(indexed, tmp_path, tiny_model_dir, capsys):
    index, documents = indexed
    _write(tmp_path / "new.jsonl", [dict(documents[0], _id="new", metadata={"year": "recent"})])
    capsys.readouterr()
    assert _update(index, tiny_model_dir, tmp_path / "new.jsonl") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and (
        f"{tmp_path / 'new.jsonl'}:1: document 'new' field `metadata.year` is a string, but the index's document "
        f"'d0' has a number: a field holds one type (fix its value in {tmp_path / 'new.jsonl'}" in err
    ), err


def test_an_update_may_retype_a_field_of_every_document_it_replaces_or_deletes(tmp_path, tiny_model_dir, capsys):
    documents = [{"_id": f"d{i}", "text": f"wing lift {i}", "metadata": {"year": 2000 + i}} for i in range(3)]
    corpus = _write(tmp_path / "corpus.jsonl", documents)
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(tmp_path / "idx")]) == 0
    _write(tmp_path / "new.jsonl", [dict(d, metadata={"year": f"y{i}"}) for i, d in enumerate(documents[:2])])
    (tmp_path / "gone.txt").write_text("d2\n")
    assert (
        _update(tmp_path / "idx", tiny_model_dir, tmp_path / "new.jsonl", "--delete", str(tmp_path / "gone.txt")) == 0
    )
    hits = _search(capsys, tmp_path / "idx", tiny_model_dir, "--filter", "year in (y0, y1)")
    assert sorted(i for i, _ in hits) == ["d0", "d1"]


def test_updates_record_each_segments_metadata_types_and_read_only_the_segments_that_could_disagree(
    tmp_path, tiny_model_dir, monkeypatch
):
    from gtr_keras.retrieval import index_updates

    read = []
    live_corpus = index_updates.live_corpus
    monkeypatch.setattr(
        index_updates, "live_corpus", lambda sources, **kwargs: read.append(sources) or live_corpus(sources, **kwargs)
    )
    corpus = _write(tmp_path / "corpus.jsonl", _documents(6))
    index = tmp_path / "idx"
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(index), "--no-bm25"]) == 0
    _write(tmp_path / "one.jsonl", [dict(_documents(7)[6], metadata={"year": 2031})])
    assert _update(index, tiny_model_dir, tmp_path / "one.jsonl") == 0
    assert len(read) == 1  # the base segment records no types yet: read once, then recorded
    segments = json.loads((index / "index" / "segments.json").read_text())["segments"]
    assert [s.get("metadata_types") for s in segments] == [
        {"lang": "string", "tags": "list", "year": "number"},
        {"year": "number"},
    ]
    _write(tmp_path / "two.jsonl", [dict(_documents(8)[7], metadata={"year": 2032, "lang": "it"})])
    assert _update(index, tiny_model_dir, tmp_path / "two.jsonl") == 0
    assert len(read) == 1  # every segment's record agrees with the update's types: no document read
    _write(tmp_path / "three.jsonl", [dict(_documents(9)[8], metadata={"year": "late"})])
    assert _update(index, tiny_model_dir, tmp_path / "three.jsonl") == 2
    assert len(read) == 4  # each segment records year as a number: each one's documents read, the update refused


def test_a_recorded_type_whose_documents_are_all_gone_does_not_refuse_an_update(tmp_path, tiny_model_dir, capsys):
    documents = [{"_id": f"d{i}", "text": f"wing lift {i}", "metadata": {"year": 2000 + i}} for i in range(3)]
    index = tmp_path / "idx"
    corpus = _write(tmp_path / "corpus.jsonl", documents)
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(index)]) == 0
    added = {"_id": "d3", "text": "wing lift 3", "metadata": {"year": 2003}}
    assert _update(index, tiny_model_dir, _write(tmp_path / "one.jsonl", [added])) == 0
    retyped = [dict(d, metadata={"year": f"y{i}"}) for i, d in enumerate([documents[0], documents[1], added])]
    (tmp_path / "gone.txt").write_text("d2\n")
    new = _write(tmp_path / "two.jsonl", retyped)
    assert _update(index, tiny_model_dir, new, "--delete", str(tmp_path / "gone.txt")) == 0
    hits = _search(capsys, index, tiny_model_dir, "--filter", "year in (y0, y1, y2)")
    assert sorted(i for i, _ in hits) == ["d0", "d1", "d3"]
    assert main(["check", str(index)]) == 0


def test_shards_searched_as_one_filter_their_union(indexed, tmp_path, tiny_model_dir, tiny_encoder, capsys):
    index, documents = indexed
    more = [dict(d, _id=f"e{i}", text=f"{d['text']} jet") for i, d in enumerate(_documents(20))]
    corpus = _write(tmp_path / "more.jsonl", more)
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(tmp_path / "more")]) == 0
    hits = _search(capsys, index, tiny_model_dir, "--index", str(tmp_path / "more"), "--filter", "lang = de")
    expected = _top(_gtr_truth(tiny_encoder, documents + more, lambda m: m["lang"] == "de"))
    assert [i for i, _ in hits] == [i for i, _ in expected]


def test_an_update_from_embeddings_warns_that_replaced_documents_lose_their_metadata(tmp_path, tiny_encoder):
    from gtr_keras.beir.readers import load_corpus
    from gtr_keras.errors import DataWarning
    from gtr_keras.retrieval.index_building import build_index
    from gtr_keras.retrieval.index_updates import update_index

    corpus = load_corpus(_write(tmp_path / "corpus.jsonl", _documents(6)))
    build_index(tiny_encoder, corpus, tmp_path / "idx")
    np.save(tmp_path / "e.npy", tiny_encoder.encode_documents(["new one", "new two"]))
    (tmp_path / "e.ids.txt").write_text("d1\nnew\n")
    with pytest.warns(DataWarning, match="1 replaced document loses its metadata"):
        update_index(tmp_path / "idx", embeddings=str(tmp_path / "e.npy"), encoder=tiny_encoder)


def test_an_update_from_embeddings_with_their_metadata_corpus_keeps_documents_and_metadata(
    tmp_path, tiny_model_dir, capsys
):
    from gtr_keras.lexical.bm25_side import has_bm25_side

    corpus = _write(tmp_path / "corpus.jsonl", _documents(6))
    index = tmp_path / "idx"
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(index)]) == 0
    changed = _write(tmp_path / "new.jsonl", [dict(_documents(6)[1], metadata={"lang": "xx", "year": 2050})])
    assert (
        main(["encode", "--model", tiny_model_dir, "--input", str(changed), "--output", str(tmp_path / "e.npy")]) == 0
    )
    argv = ["update", str(index), "--embeddings", str(tmp_path / "e.npy"), "--metadata-corpus", str(changed)]
    assert main(argv) == 0
    assert "lose" not in capsys.readouterr().err and has_bm25_side(index)
    hits = _search(capsys, index, tiny_model_dir, "--filter", "lang = xx", "--retriever", "hybrid")
    assert [i for i, _ in hits] == ["d1"]
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "update",
                str(index),
                "--model",
                tiny_model_dir,
                "--corpus",
                str(changed),
                "--metadata-corpus",
                str(changed),
            ]
        )
    assert exit_.value.code == 2 and "argument --metadata-corpus: only with --embeddings" in capsys.readouterr().err
