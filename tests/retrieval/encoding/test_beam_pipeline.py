import argparse
import gzip
import json
import os
import re
import uuid

import numpy as np
import pytest

pytest.importorskip("apache_beam")

import tensorflow as tf  # noqa: E402
from apache_beam.io.filesystem import FileMetadata  # noqa: E402
from apache_beam.io.localfilesystem import LocalFileSystem  # noqa: E402

import gtr_keras  # noqa: E402
from gtr_keras.beir.readers import load_corpus
from gtr_keras.cli.helpers.shared_flags import add_beam_arguments  # noqa: E402
from gtr_keras.cli.main import main  # noqa: E402
from gtr_keras.errors import DataError, MismatchError, UserError  # noqa: E402
from gtr_keras.retrieval.encoding.beam_pipeline import (
    MANIFEST,
    beam_pipeline_args,
    corpus_files,
    corpus_from_embedding_files,
    encode_corpus_with_beam,
    index_from_embedding_files,
    read_documents,
)
from gtr_keras.retrieval.encoding.model_handlers import GTRModelHandler  # noqa: E402
from gtr_keras.storage.search_index import SearchIndex  # noqa: E402

WORDS = "retrieval dense encoder passage query neural sparse index token corpus".split()
CRANFIELD = os.path.join(os.path.dirname(gtr_keras.__file__), "assets", "cranfield", "corpus.jsonl.gz")
CRANFIELD_DOCS = 240
CRANFIELD_SPLIT = (70, 50, 80, 40)  # documents per corpus file, in order


def write_corpus(path, num_docs):
    """A corpus with varied lengths, optional titles and integer ids."""
    records = []
    for i in range(num_docs):
        record = {"_id": i if i % 5 == 0 else f"doc-{i}", "text": " ".join(WORDS[j % 10] for j in range(i, 3 * i + 1))}
        if i % 3:
            record["title"] = f"Title {WORDS[i % 10]}"
        records.append(record)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def write_embedding_file(directory, number, total, ids, files=None, lines=None, dims=4):
    """An embedding file of `encode_corpus_with_beam`'s format (documents: text = id)."""
    files = [0] * len(ids) if files is None else files
    lines = list(range(1, len(ids) + 1)) if lines is None else lines
    documents = "".join(json.dumps({"_id": i, "title": "", "text": i}) + "\n" for i in ids)
    np.savez(
        os.path.join(directory, f"embeddings-{number:05d}-of-{total:05d}.npz"),
        ids=np.array(ids, dtype=str),
        files=np.array(files, np.int32),
        lines=np.array(lines, np.int64),
        embeddings=np.ones((len(ids), dims), np.float32),
        documents=np.frombuffer(gzip.compress(documents.encode("utf-8")), np.uint8),
    )


def write_manifest(directory, paths):
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as f:
        json.dump({"corpus": "CORPUS", "files": paths}, f)


def cranfield_lines():
    with gzip.open(CRANFIELD, "rb") as f:
        return [next(f) for _ in range(CRANFIELD_DOCS)]


def write_cranfield_corpus_files(directory):
    """The first `CRANFIELD_DOCS` Cranfield documents as `corpus-0000{i}.jsonl.gz` files (any tf.io.gfile path)."""
    lines, start = cranfield_lines(), 0
    for number, size in enumerate(CRANFIELD_SPLIT):
        with tf.io.gfile.GFile(f"{directory}/corpus-{number:05d}.jsonl.gz", "wb") as f:
            f.write(gzip.compress(b"".join(lines[start : start + size])))
        start += size
    assert start == CRANFIELD_DOCS
    return f"{directory}/corpus-*.jsonl.gz"


def index_contents(index_dir):
    """`(ids, embeddings, documents.jsonl.gz uncompressed)` of an index directory."""
    index = SearchIndex.load(os.path.join(index_dir, "index"))
    with gzip.open(os.path.join(index_dir, "documents.jsonl.gz"), "rb") as f:
        return index.ids, index.embeddings, f.read()


@pytest.fixture(scope="module")
def cranfield_in_process(tmp_path_factory, tiny_model_dir):
    """The in-process `gtr-keras index` of the unsplit Cranfield sample: `(ids, embeddings, documents)`."""
    from gtr_keras.cli.main import main

    root = tmp_path_factory.mktemp("cranfield")
    (root / "corpus.jsonl.gz").write_bytes(gzip.compress(b"".join(cranfield_lines())))
    assert (
        main(
            [
                "index",
                "--model",
                tiny_model_dir,
                "--corpus",
                str(root / "corpus.jsonl.gz"),
                "--out",
                str(root / "index"),
            ]
        )
        == 0
    )
    return index_contents(root / "index")


@pytest.fixture
def launcher_never_loads_the_corpus(monkeypatch):
    """`load_corpus` raises: the launching process must only list the corpus files (the pipeline's
    readers, in-process under the DirectRunner, stream them with `iter_jsonl`)."""
    from gtr_keras.beir import dataset
    from gtr_keras.beir import readers as corpus

    def refuse(*args, **kwargs):
        raise AssertionError("the launcher loaded the corpus")

    monkeypatch.setattr(corpus, "load_corpus", refuse)
    monkeypatch.setattr(dataset, "load_corpus", refuse)


def beam_index_argv(model_dir, corpus, out, *extra):
    return [
        "index",
        "--model",
        model_dir,
        "--corpus",
        corpus,
        "--out",
        out,
        "--runner",
        "DirectRunner",
        "--file-rows",
        "64",
        *extra,
    ]


def test_direct_runner_matches_in_process_encoder(tmp_path, tiny_model_dir, tiny_encoder):
    collection = tmp_path / "collection"
    collection.mkdir()
    write_corpus(collection / "corpus.jsonl.gz", 60)
    out = tmp_path / "embeddings"

    encode_corpus_with_beam(tiny_model_dir, str(collection), str(out), batch_size=8, group_size=8, file_rows=16)
    corpus, embeddings = corpus_from_embedding_files(str(out))

    expected = load_corpus(collection)
    names = sorted(name for name in os.listdir(out) if name != MANIFEST)
    assert len(names) >= 4 and names == [f"embeddings-{i:05d}-of-{len(names):05d}.npz" for i in range(len(names))]
    assert all(len(np.load(out / name)["ids"]) <= 16 for name in names)
    assert corpus == expected
    assert embeddings.dtype == np.float32
    np.testing.assert_allclose(
        embeddings, tiny_encoder.encode_documents(expected.joined(), batch_size=8), atol=1e-6, rtol=0
    )
    ids, same_embeddings = index_from_embedding_files(str(out))
    assert ids == expected.ids
    np.testing.assert_array_equal(same_embeddings, embeddings)
    hits, _ = SearchIndex(ids, embeddings, kind="exact").search_ids(embeddings[:5], k=1)
    assert hits == [[i] for i in ids[:5]]


def test_index_of_cranfield_in_several_corpus_files_equals_the_in_process_index(
    tmp_path, tiny_model_dir, cranfield_in_process, launcher_never_loads_the_corpus
):
    from gtr_keras.cli.main import main

    (tmp_path / "corpus").mkdir()
    pattern = write_cranfield_corpus_files(str(tmp_path / "corpus"))
    assert main(beam_index_argv(tiny_model_dir, pattern, str(tmp_path / "index"))) == 0

    ids, embeddings, documents = index_contents(tmp_path / "index")
    expected_ids, expected_embeddings, expected_documents = cranfield_in_process
    assert len(ids) == CRANFIELD_DOCS and ids == expected_ids
    np.testing.assert_allclose(embeddings, expected_embeddings, atol=1e-6, rtol=0)
    assert documents == expected_documents
    assert not any(p.name.endswith("-beam") for p in tmp_path.iterdir())


PENGUINS = "Emperor penguins breed in large colonies on the Antarctic sea ice during the dark polar winter."
LONG_DOCUMENTS = {
    "long@1": ("Wing aerodynamics", "The wing of an aircraft produces lift as air flows over it. " * 8 + PENGUINS),
    "gulls": ("Seabirds", "Gulls nest on coastal cliffs and feed on fish along the shore."),
    "tail": ("", "The tail of an aircraft keeps it stable: the fin against yaw, the tailplane against pitch."),
}


def _passages_hits(index_dir, capsys):
    capsys.readouterr()
    argv = ["search", "Where do emperor penguins breed?", "--index", str(index_dir), "-k", "3", "--json"]
    assert main([*argv, "--model", "gtr_small_distilled_en"]) == 0
    return json.loads(capsys.readouterr().out)[0]["hits"]


@pytest.mark.large
@pytest.mark.slow
def test_a_beam_passages_index_equals_the_in_process_one(tmp_path, capsys):
    with open(tmp_path / "corpus.jsonl", "w") as f:
        for number, (doc_id, (title, text)) in enumerate(LONG_DOCUMENTS.items()):
            metadata = {"metadata": {"n": number}} if number != 1 else {}
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text, **metadata}) + "\n")
    argv = ["index", "--model", "gtr_small_distilled_en", "--corpus", str(tmp_path / "corpus.jsonl")]
    assert main([*argv, "--out", str(tmp_path / "in-process"), "--passages", "32:16"]) == 0
    assert main([*argv, "--out", str(tmp_path / "beam"), "--passages", "32:16", "--runner", "DirectRunner"]) == 0

    ids, embeddings, documents = index_contents(tmp_path / "beam")
    expected_ids, expected_embeddings, expected_documents = index_contents(tmp_path / "in-process")
    assert ids == expected_ids and len(ids) > len(LONG_DOCUMENTS) and ids[0].startswith("long@1@0-")
    np.testing.assert_allclose(embeddings, expected_embeddings, atol=1e-5, rtol=0)
    assert documents == expected_documents  # each row's title, window text and metadata
    with open(tmp_path / "beam" / "retriever.json") as f:
        assert json.load(f)["passages"] == {"tokens": 32, "stride": 16}
    hits, expected_hits = _passages_hits(tmp_path / "beam", capsys), _passages_hits(tmp_path / "in-process", capsys)
    assert [(hit["id"], hit["passage"]) for hit in hits] == [(hit["id"], hit["passage"]) for hit in expected_hits]
    np.testing.assert_allclose([h["score"] for h in hits], [h["score"] for h in expected_hits], atol=1e-5)
    text = LONG_DOCUMENTS["long@1"][1]
    assert hits[0]["id"] == "long@1" and PENGUINS in text[hits[0]["passage"]["start"] : hits[0]["passage"]["end"]]
    assert hits[0]["passage"]["start"] > 0  # a window past the first


def test_a_corpus_given_in_python_is_refused_by_the_pipeline_which_reads_files(tmp_path, tiny_model_dir):
    corpus = gtr_keras.Corpus(["d1"], [""], ["lift"])
    with pytest.raises(UserError, match="^each Beam worker reads corpus files: pass their path or glob, not a Corpus$"):
        gtr_keras.Index.build(tmp_path / "idx", corpus, tiny_model_dir, runner="DirectRunner")
    assert not (tmp_path / "idx").exists()


def test_index_reads_corpus_files_on_any_gfile_file_system(
    tmp_path, tiny_model_dir, cranfield_in_process, launcher_never_loads_the_corpus
):
    from gtr_keras.cli.main import main

    pattern = write_cranfield_corpus_files(f"ram://cranfield-{uuid.uuid4().hex}")
    assert corpus_files(pattern) == [pattern.replace("*", f"{n:05d}") for n in range(len(CRANFIELD_SPLIT))]
    assert main(beam_index_argv(tiny_model_dir, pattern, str(tmp_path / "index"))) == 0

    ids, embeddings, documents = index_contents(tmp_path / "index")
    expected_ids, expected_embeddings, expected_documents = cranfield_in_process
    assert ids == expected_ids
    np.testing.assert_allclose(embeddings, expected_embeddings, atol=1e-6, rtol=0)
    assert documents == expected_documents


def _error_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("gtr-keras index: error:")]


def test_duplicate_ids_across_corpus_files_end_the_command_with_one_line(tmp_path, tiny_model_dir, capsys):
    from gtr_keras.cli.main import main

    (tmp_path / "corpus-00000.jsonl").write_text('{"_id": "a", "text": "x"}\n{"_id": 7, "text": "y"}\n')
    (tmp_path / "corpus-00001.jsonl").write_text('{"_id": "b", "text": "z"}\n\n{"_id": "7", "text": "w"}\n')
    pattern = str(tmp_path / "corpus-*.jsonl")

    assert main(beam_index_argv(tiny_model_dir, pattern, str(tmp_path / "index"))) == 2
    first, again = tmp_path / "corpus-00000.jsonl", tmp_path / "corpus-00001.jsonl"
    assert _error_lines(capsys) == [
        f"gtr-keras index: error: {pattern}: 1 duplicate `_id` value(s), e.g. '7' ({first}:2 and {again}:3)"
    ]
    assert not (tmp_path / "index").exists()


@pytest.mark.parametrize("where", ["local", "ram"])
def test_a_glob_matching_nothing_fails_before_the_model_loads(tmp_path, tiny_model_dir, monkeypatch, capsys, where):
    from gtr_keras import saving

    monkeypatch.setattr(saving, "load_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    directory = str(tmp_path) if where == "local" else f"ram://empty-{uuid.uuid4().hex}"
    pattern = f"{directory}/corpus-*.jsonl.gz"

    assert main(beam_index_argv(tiny_model_dir, pattern, str(tmp_path / "index"))) == 2
    assert _error_lines(capsys) == [f"gtr-keras index: error: {pattern}: no file matches this pattern"]


def test_a_glob_without_runner_is_refused_naming_the_flag(tmp_path, tiny_model_dir, monkeypatch, capsys):
    from gtr_keras import saving

    monkeypatch.setattr(saving, "load_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    write_corpus(tmp_path / "corpus-00000.jsonl.gz", 3)
    pattern = str(tmp_path / "corpus-*.jsonl.gz")
    assert main(["index", "--model", tiny_model_dir, "--corpus", pattern, "--out", str(tmp_path / "index")]) == 2
    assert _error_lines(capsys) == [
        f"gtr-keras index: error: {pattern}: a glob of corpus files needs --runner (e.g. --runner DirectRunner)"
    ]


def test_a_rerun_after_a_failure_encodes_afresh(tmp_path, tiny_model_dir, tiny_encoder, monkeypatch):
    from gtr_keras.cli.main import main
    from gtr_keras.retrieval import index_building

    corpus_path = tmp_path / "corpus.jsonl.gz"
    write_corpus(corpus_path, 20)
    argv = beam_index_argv(tiny_model_dir, str(corpus_path), str(tmp_path / "index"))
    with monkeypatch.context() as patch:
        patch.setattr(index_building, "write_index", lambda *args: (_ for _ in ()).throw(OSError(28, "disk full")))
        assert main(argv) == 2
    beam_dir = tmp_path / "index.partial-beam"
    assert (beam_dir / MANIFEST).is_file()
    original = gzip.decompress(corpus_path.read_bytes()).decode("utf-8")
    with gzip.open(corpus_path, "wt", encoding="utf-8") as f:
        f.write(original.replace("Title", "Changed title", 1))

    assert main(argv) == 0
    corpus = load_corpus(str(corpus_path))
    ids, embeddings, documents = index_contents(tmp_path / "index")
    assert ids == corpus.ids and b"Changed title" in documents
    np.testing.assert_allclose(embeddings, tiny_encoder.encode_documents(corpus.joined()), atol=1e-6, rtol=0)
    assert not beam_dir.exists()


def test_malformed_line_fails_naming_file_and_line(tmp_path, tiny_model_dir):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "text": "unterminated\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{re.escape(str(corpus))}:2: malformed JSON"):
        encode_corpus_with_beam(tiny_model_dir, str(corpus), str(tmp_path / "out"))
    assert not (tmp_path / "out" / MANIFEST).exists()


def test_refuses_output_dir_with_the_output_of_an_earlier_run(tmp_path, tiny_model_dir):
    write_corpus(tmp_path / "corpus.jsonl.gz", 3)
    write_embedding_file(tmp_path, 0, 1, ["a"])
    with pytest.raises(FileExistsError, match="earlier run"):
        encode_corpus_with_beam(tiny_model_dir, str(tmp_path / "corpus.jsonl.gz"), str(tmp_path))


def test_corpus_files_of_a_directory_a_file_and_a_glob(tmp_path):
    write_corpus(tmp_path / "corpus.jsonl.gz", 1)
    (tmp_path / "part-1.jsonl").write_text("")
    (tmp_path / "part-0.jsonl").write_text("")
    assert corpus_files(tmp_path) == [str(tmp_path / "corpus.jsonl.gz")]
    assert corpus_files(str(tmp_path / "part-1.jsonl")) == [str(tmp_path / "part-1.jsonl")]
    assert corpus_files(str(tmp_path / "part-?.jsonl")) == [str(tmp_path / f"part-{i}.jsonl") for i in (0, 1)]
    with pytest.raises(DataError, match="no such file or directory"):
        corpus_files(str(tmp_path / "missing.jsonl"))


def test_read_documents_parses_like_load_corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"_id": 3, "title": "A title", "text": "  Body. "}\n\n{"_id": "d2", "title": null, "text": ""}\n'
    )
    assert list(read_documents(4, str(path))) == [
        (("3", 4, 1, "A title", "  Body. ", ""), "A title   Body."),  # as Corpus.joined()
        (("d2", 4, 3, "", "", ""), ""),
    ]


def test_read_documents_carries_the_metadata_checked_as_load_corpus_checks_it(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "a", "text": "x", "metadata": {"year": 2019, "lang": null}}\n{"_id": "b", "text": "y"}\n')
    assert [key[5] for key, _ in read_documents(0, str(path))] == ['{"year": 2019}', ""]
    path.write_text('{"_id": "a", "text": "x", "metadata": {"year": 2019}}\n{"_id": "b", "text": "y", "metadata": 3}\n')
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: field `metadata` must be an object"):
        list(read_documents(0, str(path)))


def test_a_beam_build_keeps_the_metadata_that_filters_search(tmp_path, tiny_model_dir, capsys):
    documents = [
        {"_id": f"d{i}", "text": f"wing lift {i}", "metadata": {"year": 2000 + i, "lang": ["en", "de"][i % 2]}}
        for i in range(6)
    ]
    for number, part in enumerate((documents[:3], documents[3:])):
        (tmp_path / f"corpus-{number:05d}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in part))
    pattern, index = str(tmp_path / "corpus-*.jsonl"), str(tmp_path / "index")
    assert main(beam_index_argv(tiny_model_dir, pattern, index)) == 0
    capsys.readouterr()
    argv = ["search", "--index", index, "--model", tiny_model_dir, "--json", "-k", "6", "--filter", "lang = de"]
    assert main([*argv, "--filter", "year > 2001", "wing"]) == 0
    assert sorted(hit["id"] for hit in json.loads(capsys.readouterr().out)[0]["hits"]) == ["d3", "d5"]
    (tmp_path / "corpus-00001.jsonl").write_text('{"_id": "d9", "text": "x", "metadata": {"year": "late"}}\n')
    assert main(beam_index_argv(tiny_model_dir, pattern, str(tmp_path / "other"))) == 2
    assert _error_lines(capsys) == [
        f"gtr-keras index: error: {tmp_path / 'corpus-00001.jsonl'}:1: document 'd9' field `metadata.year` is a "
        f"string, but document 'd0' ({tmp_path / 'corpus-00000.jsonl'}:1) has a number: a field holds one type"
    ]


@pytest.mark.parametrize(
    "line, message",
    [
        (b'["d1", "text"]', "expected a JSON object, got list"),
        (b'{"text": "no id"}', "missing field `_id`"),
        (b'{"_id": true, "text": "x"}', "field `_id` must be a string or an integer"),
        (b'{"_id": "d1"}', "missing field `text`"),
        (b'{"_id": "d1", "title": 5, "text": "x"}', "field `title` must be a string"),
        (
            b'{"_id": "d1", "text": "x", "metadata": {"n": 1' + b"0" * 400 + b"}}",
            "document 'd1' field `metadata.n` is a number that does not fit a float64",
        ),
    ],
)
def test_read_documents_errors_name_file_line_and_field(tmp_path, line, message):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"_id": "ok", "text": "x"}\n' + line + b"\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: {re.escape(message)}"):
        list(read_documents(0, str(path)))


def test_embedding_files_are_read_back_complete_or_not_at_all(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"no {MANIFEST}"):
        index_from_embedding_files(str(tmp_path))
    write_manifest(tmp_path, ["f0"])
    with pytest.raises(FileNotFoundError, match="no embeddings-SSSSS-of-NNNNN.npz embedding files"):
        index_from_embedding_files(str(tmp_path))
    write_embedding_file(tmp_path, 0, 3, ["a"])
    write_embedding_file(tmp_path, 2, 3, ["c"], lines=[2])
    with pytest.raises(DataError, match="1 of 3 embedding files missing, the first is file 1"):
        index_from_embedding_files(str(tmp_path))
    write_embedding_file(tmp_path, 1, 2, ["b"], lines=[3])
    with pytest.raises(MismatchError, match=r"embedding files of different runs \(totals \[2, 3\]\)"):
        index_from_embedding_files(str(tmp_path))


@pytest.mark.parametrize(
    "files, error, message",
    [
        (
            [(0, 2, ["a"], {"lines": [1]}), (1, 2, ["b"], {"lines": [1]})],
            MismatchError,
            "f0.jsonl:1 is in more than one row (embedding files of different runs?)",
        ),
        (
            [(0, 2, ["a"], {"lines": [1]}), (1, 2, ["b"], {"lines": [2], "dims": 8})],
            DataError,
            "embedding files have different embedding sizes [4, 8]",
        ),
        (
            [(0, 1, ["a"], {"files": [3]})],
            DataError,
            "embedding files name file numbers missing from corpus_files.json",
        ),
    ],
)
def test_stale_or_mixed_embedding_files_are_user_errors_naming_their_directory(tmp_path, files, error, message):
    write_manifest(tmp_path, ["f0.jsonl"])
    for number, total, ids, extra in files:
        write_embedding_file(tmp_path, number, total, ids, **extra)
    with pytest.raises(error, match=re.escape(f"{tmp_path}: {message}")) as raised:
        index_from_embedding_files(str(tmp_path))
    assert isinstance(raised.value, UserError)


def test_a_stale_embedding_file_directory_is_exit_2_not_a_bug(tmp_path, tiny_model_dir, monkeypatch, capsys):
    from gtr_keras.retrieval.encoding import beam_pipeline

    def stale_run(model_dir, corpus_path, output_dir, **kwargs):
        os.makedirs(output_dir)
        write_manifest(output_dir, ["f0.jsonl"])
        write_embedding_file(output_dir, 0, 2, ["a"])
        write_embedding_file(output_dir, 1, 3, ["b"], lines=[2])

    monkeypatch.setattr(beam_pipeline, "encode_corpus_with_beam", stale_run)
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": "a", "text": "x"}) + "\n")
    assert (
        main(
            [
                "index",
                "--model",
                tiny_model_dir,
                "--corpus",
                str(tmp_path / "corpus.jsonl"),
                "--out",
                str(tmp_path / "index"),
                "--runner",
                "DirectRunner",
            ]
        )
        == 2
    )
    error = capsys.readouterr().err.strip()
    assert error.startswith("gtr-keras index: error: ") and "embedding files of different runs" in error, error


def test_embedding_files_are_assembled_in_corpus_order_and_duplicate_ids_named(tmp_path):
    write_manifest(tmp_path, ["f0.jsonl", "f1.jsonl"])
    write_embedding_file(tmp_path, 0, 2, ["b", "a"], files=[1, 0], lines=[1, 4])
    write_embedding_file(tmp_path, 1, 2, ["c", "b"], files=[0, 1], lines=[2, 5])
    with pytest.raises(
        DataError, match=re.escape("CORPUS: 1 duplicate `_id` value(s), e.g. 'b' (f1.jsonl:1 and f1.jsonl:5)")
    ):
        index_from_embedding_files(str(tmp_path))
    write_embedding_file(tmp_path, 1, 2, ["c", "aa"], files=[0, 1], lines=[2, 5])
    corpus, embeddings = corpus_from_embedding_files(str(tmp_path))
    assert corpus.ids == ["c", "a", "b", "aa"] == index_from_embedding_files(str(tmp_path))[0]
    assert corpus.texts == corpus.ids and corpus.titles == [""] * 4
    assert embeddings.shape == (4, 4)


def test_a_document_id_twice_among_passages_rows_is_named_once_per_document(tmp_path):
    with open(os.path.join(tmp_path, MANIFEST), "w", encoding="utf-8") as f:
        json.dump({"corpus": "CORPUS", "files": ["f0.jsonl"], "passages": {"tokens": 8, "stride": 8}}, f)
    write_embedding_file(tmp_path, 0, 1, ["a@0-5", "b@0-3", "a@0-7"], lines=[1, 2, 3])
    with pytest.raises(
        DataError, match=re.escape("CORPUS: 1 duplicate `_id` value(s), e.g. 'a' (f0.jsonl:1 and f0.jsonl:3)")
    ):
        index_from_embedding_files(str(tmp_path))


class _FakeRemoteFileSystem(LocalFileSystem):
    """`gtrtest://PATH` is the local PATH, standing in for `gs://` and the like."""

    @classmethod
    def scheme(cls):
        return "gtrtest"

    def open(self, path, *args, **kwargs):
        return super().open(path.removeprefix("gtrtest://"), *args, **kwargs)

    def match(self, patterns, limits=None):
        results = super().match([p.removeprefix("gtrtest://") for p in patterns], limits)
        for result in results:
            result.metadata_list = [
                FileMetadata("gtrtest://" + m.path, m.size_in_bytes, m.last_updated_in_seconds)
                for m in result.metadata_list
            ]
        return results


def test_model_handler_stages_a_remote_model_dir_and_removes_the_copy(
    tiny_model_dir, tiny_encoder, tmp_path, monkeypatch
):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    encoder = GTRModelHandler("gtrtest://" + tiny_model_dir).load_model()
    texts = ["a short document", "a somewhat longer document about dense retrieval"]
    np.testing.assert_allclose(encoder.encode_documents(texts), tiny_encoder.encode_documents(texts), atol=1e-6)
    assert not [name for name in os.listdir(tmp_path) if name.startswith("gtr-keras-")]  # the copy is gone


def test_the_index_command_passes_the_model_it_records_to_the_workers(tmp_path, tiny_model_dir, monkeypatch, capsys):
    from gtr_keras.cli.main import main
    from gtr_keras.retrieval.encoding import model_handlers

    corpus_path = tmp_path / "corpus.jsonl.gz"
    write_corpus(corpus_path, 8)
    monkeypatch.setattr(model_handlers, "fingerprint", lambda encoder: "0" * 64)  # what the workers load differs
    assert main(beam_index_argv(tiny_model_dir, str(corpus_path), str(tmp_path / "index"))) == 2
    assert "the model changed while the pipeline ran (fingerprint " + "0" * 64 in capsys.readouterr().err
    assert not (tmp_path / "index").exists()


def test_a_worker_that_loads_another_model_than_the_driver_fails(tiny_model_dir, tiny_encoder):
    from gtr_keras.errors import CheckpointError
    from gtr_keras.models.model_files.fingerprint import fingerprint

    expected = fingerprint(tiny_encoder)
    assert GTRModelHandler(tiny_model_dir, model_sha256=expected).load_model() is not None
    with pytest.raises(
        CheckpointError,
        match=r"the model changed while the pipeline ran \(fingerprint "
        rf"{expected}, {'0' * 64} when it started\)",
    ):
        GTRModelHandler(tiny_model_dir, model_sha256="0" * 64).load_model()


def test_beam_arguments_become_pipeline_args():
    parser = argparse.ArgumentParser()
    add_beam_arguments(parser)
    args = parser.parse_args(
        ["--runner", "DataflowRunner", "--beam-option", "region=us-central1", "--beam-option", "save_main_session"]
    )
    assert args.runner == "DataflowRunner"
    assert beam_pipeline_args(args.beam_option) == ["--region=us-central1", "--save_main_session"]
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        beam_pipeline_args(["--region=us-central1"])
