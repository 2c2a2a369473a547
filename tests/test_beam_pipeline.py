import argparse
import gzip
import json
import os
import re

import numpy as np
import pytest

pytest.importorskip("apache_beam")

from apache_beam.io.filesystem import FileMetadata  # noqa: E402
from apache_beam.io.localfilesystem import LocalFileSystem  # noqa: E402

from gtr_keras.beam_pipeline import (  # noqa: E402
    GTRModelHandler,
    beam_pipeline_args,
    encode_corpus_with_beam,
    index_from_shards,
    parse_document,
)
from gtr_keras_cli import add_beam_arguments  # noqa: E402
from gtr_keras.corpus import DataError, load_corpus  # noqa: E402
from gtr_keras.index import SearchIndex  # noqa: E402

WORDS = "retrieval dense encoder passage query neural sparse index token corpus".split()


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


def write_shard(directory, number, total, ids, dims=4):
    np.savez(
        os.path.join(directory, f"embeddings-{number:05d}-of-{total:05d}.npz"),
        ids=np.array(ids, dtype=str),
        embeddings=np.ones((len(ids), dims), np.float32),
    )


def test_direct_runner_matches_in_process_encoder(tmp_path, tiny_model_dir, tiny_encoder):
    collection = tmp_path / "collection"
    collection.mkdir()
    write_corpus(collection / "corpus.jsonl.gz", 60)
    out = tmp_path / "shards"

    encode_corpus_with_beam(tiny_model_dir, str(collection), str(out), batch_size=8, group_size=8, shard_rows=16)
    ids, embeddings = index_from_shards(str(out))

    corpus = load_corpus(collection)
    expected = dict(zip(corpus.ids, tiny_encoder.encode_documents(corpus.joined(), batch_size=8)))
    shards = sorted(os.listdir(out))
    assert len(shards) >= 4 and shards == [f"embeddings-{i:05d}-of-{len(shards):05d}.npz" for i in range(len(shards))]
    assert all(len(np.load(out / name)["ids"]) <= 16 for name in shards)
    assert ids == sorted(corpus.ids)
    assert embeddings.dtype == np.float32
    np.testing.assert_allclose(embeddings, np.stack([expected[i] for i in ids]), atol=1e-6, rtol=0)
    hits, _ = SearchIndex(ids, embeddings, kind="exact").search_ids(embeddings[:5], k=1)
    assert hits == [[i] for i in ids[:5]]


def test_malformed_line_fails_naming_file_and_line(tmp_path, tiny_model_dir):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "text": "unterminated\n', encoding="utf-8")
    quoted_line = re.escape("""'{"_id": "b", "text": "unterminated'""")
    with pytest.raises(DataError, match=rf"bad\.jsonl:line {quoted_line}: malformed JSON"):
        encode_corpus_with_beam(tiny_model_dir, str(corpus), str(tmp_path / "out"))


def test_refuses_output_dir_with_shards_of_an_earlier_run(tmp_path, tiny_model_dir):
    write_shard(tmp_path, 0, 1, ["a"])
    with pytest.raises(FileExistsError, match="earlier run"):
        encode_corpus_with_beam(tiny_model_dir, str(tmp_path / "corpus.jsonl"), str(tmp_path))


@pytest.mark.parametrize(
    "line, expected",
    [
        (b'{"_id": "d1", "title": "A title", "text": "Body."}', ("d1", "A title Body.")),
        (b'{"_id": 3, "text": "  Body only. "}', ("3", "Body only.")),
        (b'{"_id": "d2", "title": null, "text": ""}', ("d2", "")),
        (b"   ", None),
    ],
)
def test_parse_document_joins_like_corpus(line, expected):
    assert parse_document("corpus.jsonl", line) == expected


@pytest.mark.parametrize(
    "line, message",
    [
        (b'{"_id": "d1", "text": "caf\xe9"}', "invalid UTF-8"),
        (b'["d1", "text"]', "expected a JSON object, got list"),
        (b'{"text": "no id"}', "missing field `_id`"),
        (b'{"_id": true, "text": "x"}', "field `_id` must be a string or an integer"),
        (b'{"_id": "d1"}', "missing field `text`"),
        (b'{"_id": "d1", "title": 5, "text": "x"}', "field `title` must be a string"),
    ],
)
def test_parse_document_errors_name_file_line_and_field(line, message):
    with pytest.raises(DataError, match=r"^corpus\.jsonl:line .*" + message):
        parse_document("corpus.jsonl", line)


def test_index_from_shards_rejects_missing_and_mixed_shards(tmp_path):
    with pytest.raises(FileNotFoundError, match="no embeddings-SSSSS-of-NNNNN.npz shards"):
        index_from_shards(str(tmp_path))
    write_shard(tmp_path, 0, 3, ["a"])
    write_shard(tmp_path, 2, 3, ["c"])
    with pytest.raises(ValueError, match="1 of 3 shards missing, the first is shard 1"):
        index_from_shards(str(tmp_path))
    write_shard(tmp_path, 1, 2, ["b"])
    with pytest.raises(ValueError, match=r"shards of different runs \(totals \[2, 3\]\)"):
        index_from_shards(str(tmp_path))


def test_index_from_shards_rejects_duplicate_ids_and_sorts_by_id(tmp_path):
    write_shard(tmp_path, 0, 2, ["b", "a"])
    write_shard(tmp_path, 1, 2, ["c", "b"])
    with pytest.raises(ValueError, match=r"1 id\(s\) in more than one row, e.g. 'b' in .*-00000-of-00002.npz and "
                                         r".*-00001-of-00002.npz"):
        index_from_shards(str(tmp_path))
    write_shard(tmp_path, 1, 2, ["c", "aa"])
    ids, embeddings = index_from_shards(str(tmp_path))
    assert ids == ["a", "aa", "b", "c"]
    assert embeddings.shape == (4, 4)


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


def test_model_handler_stages_a_remote_model_dir(tiny_model_dir, tiny_encoder):
    encoder = GTRModelHandler("gtrtest://" + tiny_model_dir).load_model()
    texts = ["a short document", "a somewhat longer document about dense retrieval"]
    np.testing.assert_allclose(encoder.encode_documents(texts), tiny_encoder.encode_documents(texts), atol=1e-6)


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


def test_index_command_with_direct_runner_equals_the_in_process_index(tmp_path, tiny_model_dir):
    from gtr_keras.cli import main

    corpus_path = tmp_path / "corpus.jsonl.gz"
    write_corpus(corpus_path, 40)
    for out, extra in (("beam", ["--runner", "DirectRunner", "--shard-rows", "16"]), ("local", [])):
        assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus_path),
                     "--out", str(tmp_path / out), "--batch-size", "8", *extra]) == 0
    beam = SearchIndex.load(str(tmp_path / "beam" / "index"))
    local = SearchIndex.load(str(tmp_path / "local" / "index"))
    assert beam.ids == local.ids == load_corpus(str(corpus_path)).ids
    np.testing.assert_allclose(beam.embeddings, local.embeddings, atol=1e-6)
    assert not any(p.name.endswith("-beam") for p in tmp_path.iterdir())


def test_finished_beam_shards_are_reused_only_for_the_same_corpus_and_model(tmp_path, tiny_model_dir, monkeypatch,
                                                                            capsys):
    from gtr_keras import beam_pipeline, retrieval
    from gtr_keras.cli import main

    corpus_path = tmp_path / "corpus.jsonl.gz"
    write_corpus(corpus_path, 20)
    argv = ["index", "--model", tiny_model_dir, "--corpus", str(corpus_path), "--out", str(tmp_path / "index"),
            "--runner", "DirectRunner", "--shard-rows", "8"]
    with monkeypatch.context() as patch:
        patch.setattr(retrieval, "write_index", lambda *args: (_ for _ in ()).throw(OSError(28, "disk full")))
        assert main(argv) == 2
    shard_dir = tmp_path / "index.partial-beam"
    assert (shard_dir / "inputs.json").is_file()
    original = corpus_path.read_bytes()
    with gzip.open(corpus_path, "wt", encoding="utf-8") as f:
        f.write(gzip.decompress(original).decode("utf-8").replace("Title", "Changed title", 1))
    assert main(argv) == 2
    assert "embeddings of other inputs (corpus_sha256" in capsys.readouterr().err
    corpus_path.write_bytes(original)
    runs = []
    real = beam_pipeline.encode_corpus_with_beam
    monkeypatch.setattr(beam_pipeline, "encode_corpus_with_beam", lambda *a, **k: runs.append(1) or real(*a, **k))
    assert main(argv) == 0
    assert runs == [] and not shard_dir.exists()
    assert SearchIndex.load(str(tmp_path / "index" / "index")).ids == load_corpus(str(corpus_path)).ids
