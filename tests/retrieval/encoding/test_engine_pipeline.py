import json
import time

import numpy as np
import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("qdrant_client")
pytest.importorskip("pymilvus")

from gtr_keras.beir.readers import load_corpus  # noqa: E402
from gtr_keras.cli.main import main  # noqa: E402
from gtr_keras.engines.engine import CollectionInfo  # noqa: E402
from gtr_keras.engines.qdrant_engine import point_id  # noqa: E402
from gtr_keras.engines.targets import parse_target  # noqa: E402
from gtr_keras.errors import DataError, UserError  # noqa: E402
from gtr_keras.filters.expressions import Filter  # noqa: E402
from gtr_keras.filters.metadata_columns import MetadataColumns  # noqa: E402
from gtr_keras.retrieval.encoding import engine_pipeline  # noqa: E402
from gtr_keras.retrieval.encoding.engine_pipeline import (  # noqa: E402
    check_field_types,
    corpus_chunks,
    create_collection,
    scan_corpus,
)
from gtr_keras.retrieval.index import Index  # noqa: E402
from gtr_keras.retrieval.index_building import index_metadata  # noqa: E402
from tests.engine_oracle import filtered_brute_force  # noqa: E402

DOCUMENTS = [
    {"_id": "d0", "title": "Wings", "text": "Lift on a wing.", "metadata": {"year": 2019, "lang": "en"}},
    {"_id": 7, "text": "Drag of a body in air.", "metadata": {"tags": ["a", "b"], "lang": "de"}},
    {"_id": "d2", "title": "Shocks", "text": "", "metadata": {"year": 1999.5, "peer": True}},
    {"_id": "d3", "text": "Heat transfer at high speed."},
]
TYPES = {"year": "number", "lang": "string", "tags": "list", "peer": "boolean"}


def write_lines(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return str(path)


def write_corpus(tmp_path, documents=DOCUMENTS):
    """The documents split over two corpus files; returns their glob."""
    write_lines(tmp_path / "corpus-0.jsonl", documents[:2])
    write_lines(tmp_path / "corpus-1.jsonl", documents[2:])
    return str(tmp_path / "corpus-*.jsonl")


def status(argv):
    """`main`'s exit status, a flag error's (argparse exits) included."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def error_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if "error" in line]


def test_scan_corpus_counts_documents_and_types_fields_across_files(tmp_path):
    write_corpus(tmp_path)
    paths = [str(tmp_path / "corpus-0.jsonl"), str(tmp_path / "corpus-1.jsonl")]
    assert scan_corpus(paths) == (4, TYPES)


@pytest.mark.parametrize(
    "second, message",
    [
        ({"_id": "7", "text": "again"}, r"corpus-1\.jsonl:1: duplicate `_id` '7' \(first at .*corpus-0\.jsonl:2\)"),
        ({"_id": "x", "text": "y", "metadata": {"year": "late"}}, r"corpus-1\.jsonl:1: document 'x' field `metadata\."),
        ({"text": "no id"}, r"corpus-1\.jsonl:1: .*`_id`"),
    ],
)
def test_scan_corpus_refuses_what_load_corpus_refuses_across_files(tmp_path, second, message):
    write_lines(tmp_path / "corpus-0.jsonl", DOCUMENTS[:2])
    write_lines(tmp_path / "corpus-1.jsonl", [second])
    with pytest.raises(DataError, match=message):
        scan_corpus([str(tmp_path / "corpus-0.jsonl"), str(tmp_path / "corpus-1.jsonl")])


def test_scan_corpus_refuses_a_text_past_what_the_engine_holds(tmp_path):
    path = write_lines(tmp_path / "corpus.jsonl", [{"_id": "a", "title": "é" * 5, "text": "x"}])
    assert scan_corpus([path], max_text_bytes=10) == (1, {})
    with pytest.raises(DataError, match="corpus.jsonl:1: document 'a' field `title` is past the 9 bytes the engine's"):
        scan_corpus([path], max_text_bytes=9)


def test_scan_corpus_refuses_a_corpus_without_documents(tmp_path):
    path = write_lines(tmp_path / "corpus.jsonl", [])
    with pytest.raises(DataError, match="corpus.jsonl: no documents$"):
        scan_corpus([path])


def test_corpus_chunks_carry_the_qdrant_payload_of_the_record_contract(tmp_path):
    path = write_lines(tmp_path / "corpus.jsonl", DOCUMENTS[:2])
    chunks = list(corpus_chunks(0, path))
    assert [c.id for c in chunks] == ["d0", "7"] and [c.content.text for c in chunks] == [
        d["text"] for d in DOCUMENTS[:2]
    ]
    assert chunks[1].metadata == {
        "id": "7",
        "title": "",
        "text": DOCUMENTS[1]["text"],
        "metadata": DOCUMENTS[1]["metadata"],
    }


def test_check_field_types_refuses_a_field_of_another_type_only():
    found = CollectionInfo(8, "m", {"a": "string"})
    check_field_types(None, found, "c")
    check_field_types(found, CollectionInfo(8, "m", {"a": "string", "b": "list"}), "c")
    with pytest.raises(UserError, match="^c: metadata field 'a' holds strings there, numbers in this corpus"):
        check_field_types(found, CollectionInfo(8, "m", {"a": "number"}), "c")


@pytest.mark.parametrize("engine", ["qdrant", "milvus"])
def test_create_collection_records_its_info_keeps_it_widened_and_refuses_another(tmp_path, engine):
    target = parse_target(f"{engine}:{tmp_path / 'engine.db'}")
    create_collection(target, "docs", CollectionInfo(8, "m", {"a": "string"}))
    create_collection(target, "docs", CollectionInfo(8, "m", {"b": "number"}))
    assert recorded_info(target, "docs") == CollectionInfo(8, "m", {"a": "string", "b": "number"})
    with pytest.raises(
        UserError, match=r"'docs'.* holds 8-dimensional vectors of model m.*: encode into another collection"
    ):
        create_collection(target, "docs", CollectionInfo(8, "other", {}))
    with pytest.raises(UserError, match="collection 'docs': metadata field 'b' holds numbers there, strings"):
        create_collection(target, "docs", CollectionInfo(8, "m", {"b": "string"}))


def recorded_info(target, collection):
    if target.engine == "qdrant":
        from qdrant_client import QdrantClient

        client = QdrantClient(path=target.location)
        config = client.get_collection(collection).config
        client.close()
        assert config.params.vectors["dense"].distance == "Dot"
        return CollectionInfo(**config.metadata["gtr_keras"])
    from pymilvus import MilvusClient

    client = MilvusClient(target.location)
    description = client.describe_collection(collection)
    client.close()
    assert [f["name"] for f in description["fields"]] == ["id", "embedding", "title", "text", "metadata"]
    return CollectionInfo(**json.loads(description["properties"]["gtr_keras"]))


def test_a_collection_gtr_keras_did_not_create_is_refused(tmp_path):
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(tmp_path / "q"))
    client.create_collection("theirs", vectors_config=models.VectorParams(size=8, distance="Cosine"))
    client.close()
    with pytest.raises(UserError, match="collection 'theirs' was not written by gtr-keras push"):
        create_collection(parse_target(f"qdrant:{tmp_path / 'q'}"), "theirs", CollectionInfo(8, "m", {}))


@pytest.mark.parametrize(
    "engine, message",
    [
        ("qdrant", r"^qdrant\+http://127\.0\.0\.1:9: Qdrant did not answer within 2 s: \S"),
        ("milvus", r"^target 'milvus\+http://127\.0\.0\.1:9': cannot reach Milvus \("),
    ],
)
def test_an_unreachable_engine_is_one_line_within_the_timeout(engine, message):
    start = time.monotonic()
    with pytest.raises(UserError, match=message):
        create_collection(parse_target(f"{engine}+http://127.0.0.1:9"), "docs", CollectionInfo(8, "m", {}), timeout=2)
    assert time.monotonic() - start < 30


def read_qdrant(path, collection):
    from qdrant_client import QdrantClient

    client = QdrantClient(path=path)
    points = client.scroll(collection, with_vectors=True, limit=100)[0]
    client.close()
    return {p.payload["id"]: (p.id, p.payload, np.array(p.vector["dense"])) for p in points}


def read_milvus(path, collection):
    from pymilvus import MilvusClient

    client = MilvusClient(path)
    rows = client.query(collection, filter="", output_fields=["*"], limit=100)
    client.close()
    return {r["id"]: r for r in rows}


def assert_index_searches_like_brute_force(target, collection, model_dir, encoder, dimensions=None):
    """`Index.open(target, collection=...)` searches what the pipeline wrote as NumPy brute force over the
    documents' `encode_documents` vectors does, with and without filters."""
    ids = [str(d["_id"]) for d in DOCUMENTS]
    joined = [f"{d.get('title', '')} {d['text']}".strip() for d in DOCUMENTS]
    queries = ["lift on a wing", "drag"]
    vectors = encoder.encode_documents(joined, dimensions=dimensions)
    query_vectors = encoder.encode_queries(queries, dimensions=dimensions)
    columns = MetadataColumns(ids, [d.get("metadata") for d in DOCUMENTS])
    with Index.open(target, model=model_dir, collection=collection) as index:
        assert len(index) == len(ids)
        for filter in (None, "lang != en", "year >= 2000", "tags in (a, c)"):
            allowed = np.ones(len(ids), bool) if filter is None else columns.allowed(Filter(filter))
            found = index.search(queries, k=4, filter=filter)
            for hits, (order, scores) in zip(found, filtered_brute_force(vectors, allowed, query_vectors)):
                assert [h["id"] for h in hits] == [ids[i] for i in order]
                assert [h["text"] for h in hits] == [DOCUMENTS[i]["text"] for i in order]
                np.testing.assert_allclose([h["score"] for h in hits], scores, atol=1e-5, rtol=0)


def encode_argv(model, corpus, target, *extra):
    return ["encode", "--model", model, "--runner", "DirectRunner", "--corpus", corpus, "--to", target, *extra]


def test_encode_to_qdrant_writes_the_record_contract_and_a_rerun_leaves_one_record_per_document(
    tmp_path, tiny_model_dir, tiny_encoder, capsys
):
    pattern, qdrant = write_corpus(tmp_path), str(tmp_path / "qdrant")
    argv = encode_argv(tiny_model_dir, pattern, f"qdrant:{qdrant}", "--collection", "docs", "--batch-size", "2")
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == f"wrote 4 documents to qdrant:{qdrant}, collection 'docs' (float32)"
    assert main(argv) == 0
    points = read_qdrant(qdrant, "docs")
    expected = load_corpus(tmp_path / "corpus-0.jsonl").ids + load_corpus(tmp_path / "corpus-1.jsonl").ids
    assert sorted(points) == sorted(expected)
    for document in DOCUMENTS:
        doc_id = str(document["_id"])
        pid, payload, vector = points[doc_id]
        assert pid == point_id(doc_id)
        assert payload == {
            "id": doc_id,
            "title": document.get("title", ""),
            "text": document["text"],
            "metadata": document.get("metadata", {}),
            "fields": sorted(document.get("metadata", {})),
        }
        joined = f"{document.get('title', '')} {document['text']}".strip()
        np.testing.assert_allclose(vector, tiny_encoder.encode_documents([joined])[0], atol=1e-5, rtol=0)
    model = index_metadata(tiny_encoder, tiny_model_dir)["model_sha256"]
    assert recorded_info(parse_target(f"qdrant:{qdrant}"), "docs") == CollectionInfo(64, model, TYPES)
    assert_index_searches_like_brute_force(f"qdrant:{qdrant}", "docs", tiny_model_dir, tiny_encoder)


@pytest.mark.filterwarnings("ignore:dimensions=16")
def test_encode_to_milvus_keeps_dimensions_and_metadata_and_a_rerun_upserts(
    tmp_path, tiny_model_dir, tiny_encoder, capsys
):
    pattern, milvus = write_corpus(tmp_path), str(tmp_path / "docs.db")
    argv = encode_argv(tiny_model_dir, pattern, f"milvus:{milvus}", "--dimensions", "16")
    assert main(argv) == 0 and main(argv) == 0
    rows = read_milvus(milvus, "gtr")
    assert sorted(rows) == sorted(str(d["_id"]) for d in DOCUMENTS)
    for document in DOCUMENTS:
        row = rows[str(document["_id"])]
        assert (row["title"], row["text"], row["metadata"]) == (
            document.get("title", ""),
            document["text"],
            document.get("metadata", {}),
        )
        joined = f"{document.get('title', '')} {document['text']}".strip()
        expected = tiny_encoder.encode_documents([joined], dimensions=16)[0]
        np.testing.assert_allclose(row["embedding"], expected, atol=1e-5, rtol=0)
    info = recorded_info(parse_target(f"milvus:{milvus}"), "gtr")
    assert_index_searches_like_brute_force(f"milvus:{milvus}", "gtr", tiny_model_dir, tiny_encoder, dimensions=16)
    assert (info.dimensions, info.metadata_types) == (16, TYPES)
    capsys.readouterr()
    assert main(encode_argv(tiny_model_dir, pattern, f"milvus:{milvus}")) == 2
    assert error_lines(capsys) == [
        f"gtr-keras encode: error: milvus:{milvus}: collection 'gtr' holds 16-dimensional vectors of model "
        f"{info.model[:12]}, not {tiny_encoder.embedding_dim} of model {info.model[:12]}: encode into another "
        "collection (--collection NAME)"
    ]


@pytest.mark.parametrize(
    "target, message",
    [
        ("pinecone:x", "argument --to: target 'pinecone:x': expected qdrant:PATH, "),
        ("milvus:x.txt", "argument --to: target 'milvus:x.txt': Milvus Lite's file must end in .db"),
        ("vertex-ai:{tmp}/v", "target 'vertex-ai:{tmp}/v': encode --to writes qdrant: and milvus: targets; "),
    ],
)
def test_a_target_encode_does_not_write_is_one_line_before_any_write(tmp_path, tiny_model_dir, capsys, target, message):
    target, message = target.format(tmp=tmp_path), message.format(tmp=tmp_path)
    assert status(encode_argv(tiny_model_dir, write_corpus(tmp_path), target)) == 2
    lines = error_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith(f"gtr-keras encode: error: {message}")
    assert not (tmp_path / "v").exists()


def test_a_missing_engine_package_names_the_extra(tmp_path, tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setitem(engine_pipeline.PACKAGES, "qdrant", ("no_such_package_here", "qdrant-client"))
    assert main(encode_argv(tiny_model_dir, write_corpus(tmp_path), f"qdrant:{tmp_path / 'q'}")) == 2
    assert error_lines(capsys) == [
        f"gtr-keras encode: error: target 'qdrant:{tmp_path / 'q'}': needs qdrant-client: "
        "pip install 'gtr-keras[qdrant]'"
    ]
    assert not (tmp_path / "q").exists()


def test_a_corpus_error_in_the_last_file_is_one_line_before_the_collection_is_created(tmp_path, tiny_model_dir, capsys):
    pattern = write_corpus(tmp_path, DOCUMENTS[:3] + [{"_id": "d0", "text": "again"}])
    assert main(encode_argv(tiny_model_dir, pattern, f"qdrant:{tmp_path / 'q'}")) == 2
    assert error_lines(capsys) == [
        f"gtr-keras encode: error: {tmp_path / 'corpus-1.jsonl'}:2: duplicate `_id` 'd0' (first at "
        f"{tmp_path / 'corpus-0.jsonl'}:1); ids name one document"
    ]
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "argument --to: needs --corpus and --runner (e.g. --runner DirectRunner)"),
        (["--runner", "DirectRunner", "--corpus", "C", "--output", "o.npy"], "argument --output: not with --to"),
    ],
)
def test_encode_flags_of_the_two_ways_do_not_mix(tmp_path, tiny_model_dir, capsys, extra, message):
    texts = write_lines(tmp_path / "texts.txt", [])
    extra = [texts if flag == "C" else flag for flag in extra]
    with pytest.raises(SystemExit) as exit_:
        main(["encode", "--model", tiny_model_dir, "--to", "qdrant:q", *extra])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(
            [
                "encode",
                "--model",
                tiny_model_dir,
                "--input",
                texts,
                "--output",
                str(tmp_path / "o.npy"),
                "--runner",
                "DirectRunner",
            ]
        )
    assert "argument --runner: goes with --to" in capsys.readouterr().err


def test_create_collection_clears_the_last_push_marker(tmp_path):
    from gtr_keras.engines.registry import open_engine

    target = parse_target(f"qdrant:{tmp_path / 'q'}")
    engine = open_engine(target, "c")
    engine.create(CollectionInfo(4, "m", {"lang": "string"}, marker="pushed"))
    engine.close()
    create_collection(target, "c", CollectionInfo(4, "m", {"year": "number"}))
    engine = open_engine(target, "c")
    try:
        assert engine.info() == CollectionInfo(4, "m", {"lang": "string", "year": "number"})  # the push reconciles
    finally:
        engine.close()
