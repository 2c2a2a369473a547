import json
import re

import numpy as np
import pytest

from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.storage.resumable_encoding import Piece, ResumableEncoding

DIMS = 16


def _ids(n):
    return [f"doc-{i}" for i in range(n)]


def _encode(rows):
    """Embeddings of rows `[start, end)` of a corpus, the same on every call."""
    return np.random.default_rng(rows.start).standard_normal((len(rows), DIMS)).astype(np.float32)


def _texts(n):
    return [f"text of document {i}" for i in range(n)]


MODEL = {"model_sha256": "a" * 64}


def test_piece_writer_resumes_after_interruption(tmp_path):
    ids, texts = _ids(1050), _texts(1050)
    writer = ResumableEncoding(tmp_path, ids, texts, piece_size=100, metadata=MODEL)
    assert [s.number for s in writer.pending_pieces()] == list(range(11))
    assert writer.pending_pieces()[-1] == (10, 1000, 1050)
    for piece in writer.pending_pieces()[:4]:
        writer.write(piece.number, _encode(range(piece.start, piece.end)))
    (tmp_path / ".piece-00004.npz.tmp-123").write_bytes(b"killed mid-write")

    resumed = ResumableEncoding(tmp_path, ids, texts, piece_size=100, metadata=MODEL)
    pending = resumed.pending_pieces()
    assert [s.number for s in pending] == list(range(4, 11))
    for piece in pending:
        resumed.write(piece.number, _encode(range(piece.start, piece.end)))

    uninterrupted = ResumableEncoding(tmp_path / "fresh", ids, texts, piece_size=100)
    for piece in uninterrupted.pending_pieces():
        uninterrupted.write(piece.number, _encode(range(piece.start, piece.end)))
    np.testing.assert_array_equal(resumed.assemble(), uninterrupted.assemble())
    assert resumed.assemble().shape == (1050, DIMS)
    assert not list(tmp_path.glob("*.tmp-*"))


@pytest.mark.parametrize(
    "change, what",
    [
        ({"ids": _ids(999) + ["other"]}, r"ids_sha256 \w{12}… recorded, this run has \w{12}…"),
        ({"ids": _ids(1001), "texts": _texts(1001)}, "num_rows 1000 recorded, this run has 1001"),
        ({"piece_size": 200}, "piece_size 100 recorded, this run has 200"),
        ({"metadata": {"model_sha256": "b" * 64}}, "model_sha256 a{12}… recorded, this run has b{12}…"),
        ({"metadata": {}}, "model_sha256 a{12}… recorded, this run has None"),
        ({"metadata": {**MODEL, "document_length": 256}}, "no document_length recorded"),
    ],
)
def test_piece_writer_refuses_to_resume_another_run(tmp_path, change, what):
    args = {"ids": _ids(1000), "texts": _texts(1000), "piece_size": 100, "metadata": MODEL}
    ResumableEncoding(tmp_path, **args).write(0, _encode(range(0, 100)))
    with pytest.raises(MismatchError) as error:
        ResumableEncoding(tmp_path, **{**args, **change})
    message = (
        f"{tmp_path}: these pieces were encoded from other inputs or settings ({what}); delete {tmp_path} to start over"
    )
    assert re.fullmatch(message.replace("(", r"\(").replace(")", r"\)"), str(error.value))


def _move_a_word(texts):
    texts[101], texts[102] = texts[101] + " " + texts[102].split()[0], " ".join(texts[102].split()[1:])


@pytest.mark.parametrize("edit", [lambda t: t.__setitem__(150, "edited"), _move_a_word])
def test_piece_writer_refuses_finished_pieces_of_changed_texts(tmp_path, edit):
    texts = _texts(250)
    writer = ResumableEncoding(tmp_path, _ids(250), texts, 100, MODEL)
    for piece in writer.pending_pieces()[:2]:
        writer.write(piece.number, _encode(range(piece.start, piece.end)))
    changed = list(texts)
    changed[220] = "a document of a piece not encoded yet"
    assert [s.number for s in ResumableEncoding(tmp_path, _ids(250), changed, 100, MODEL).pending_pieces()] == [2]
    edit(changed)
    with pytest.raises(
        MismatchError,
        match=re.escape(
            f"{tmp_path}: piece 1 was encoded from other texts (documents 100-199: one or more changed since); "
            f"delete {tmp_path} to start over"
        ),
    ):
        ResumableEncoding(tmp_path, _ids(250), changed, 100, MODEL)


def test_piece_writer_refuses_pieces_it_cannot_vouch_for(tmp_path):
    writer = ResumableEncoding(tmp_path, _ids(150), _texts(150), 100, MODEL)
    writer.write(0, _encode(range(0, 100)))
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"num_rows": 150, "piece_size": 100, "metadata": MODEL}))
    with pytest.raises(MismatchError, match="pieces of another version of gtr-keras; delete .* to start over"):
        ResumableEncoding(tmp_path, _ids(150), _texts(150), 100, MODEL)
    manifest.unlink()
    with pytest.raises(MismatchError, match="piece files but no manifest.json"):
        ResumableEncoding(tmp_path, _ids(150), _texts(150), 100, MODEL)


def test_piece_writer_checks_arguments(tmp_path):
    for piece_size in (0, -1, 2.0, True):
        with pytest.raises(UserError, match="piece_size must be a positive int"):
            ResumableEncoding(tmp_path, _ids(3), _texts(3), piece_size)
    with pytest.raises(UserError, match="Got 2 texts for 3 ids"):
        ResumableEncoding(tmp_path, _ids(3), _texts(2), 2)
    with pytest.raises(UserError, match=r"manifest's own fields \['piece_size'\]"):
        ResumableEncoding(tmp_path, _ids(3), _texts(3), 2, {"piece_size": 4})


def test_piece_writer_checks_rows_and_completeness(tmp_path):
    writer = ResumableEncoding(tmp_path, _ids(150), _texts(150), piece_size=100)
    with pytest.raises(UserError, match=r"rows \[100, 150\), got 100"):
        writer.write(1, _encode(range(0, 100)))
    writer.write(1, _encode(range(100, 150)))
    with pytest.raises(UserError, match="1 of 2 pieces"):
        writer.assemble()


def test_pieces_cover_the_rows_in_order_and_the_last_is_short(tmp_path):
    writer = ResumableEncoding(tmp_path, _ids(25), [""] * 25, piece_size=10)
    assert writer.num_pieces == 3
    assert [writer.piece(n) for n in range(3)] == [Piece(0, 0, 10), Piece(1, 10, 20), Piece(2, 20, 25)]
    with pytest.raises(ValueError, match=r"Piece number must be in \[0, 3\), got 3"):
        writer.piece(3)


def test_chunks_and_dims_read_the_written_pieces_back(tmp_path):
    writer = ResumableEncoding(tmp_path, _ids(25), _texts(25), piece_size=10)
    for piece in writer.pending_pieces():
        writer.write(piece.number, _encode(range(piece.start, piece.end)))
    chunks = list(writer.chunks())
    assert [chunk.shape for chunk in chunks] == [(10, DIMS), (10, DIMS), (5, DIMS)]
    assert writer.dims == DIMS and chunks[0].dtype == np.float32
    np.testing.assert_array_equal(chunks[2], _encode(range(20, 25)))


def test_a_piece_of_the_wrong_shape_on_disk_is_named(tmp_path):
    writer = ResumableEncoding(tmp_path, _ids(20), _texts(20), piece_size=10)
    writer.write(0, _encode(range(0, 10)))
    writer.write(1, _encode(range(10, 20)))
    stored = dict(np.load(tmp_path / "piece-00001.npz"))
    np.savez(tmp_path / "piece-00001.npz", **{**stored, "embeddings": stored["embeddings"][:, :4]})
    with pytest.raises(DataError, match=re.escape(f"piece-00001.npz has shape (10, 4), expected (10, {DIMS})")):
        list(writer.chunks())


def test_an_unreadable_piece_is_named_with_the_remedy(tmp_path):
    ResumableEncoding(tmp_path, _ids(20), _texts(20), piece_size=10).write(0, _encode(range(0, 10)))
    (tmp_path / "piece-00000.npz").write_bytes(b"not a zip file")
    with pytest.raises(DataError, match=f"piece-00000.npz: unreadable piece .*; delete {re.escape(str(tmp_path))}"):
        ResumableEncoding(tmp_path, _ids(20), _texts(20), piece_size=10)


def test_a_manifest_records_the_rows_the_ids_and_the_metadata(tmp_path):
    ResumableEncoding(tmp_path, _ids(5), _texts(5), 2, MODEL)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert {key: manifest[key] for key in ("num_rows", "piece_size", "model_sha256")} == {
        "num_rows": 5,
        "piece_size": 2,
        "model_sha256": MODEL["model_sha256"],
    }
    assert len(manifest["ids_sha256"]) == 64


def test_the_staging_files_of_a_killed_write_are_removed(tmp_path):
    for stale in (".piece-00001.npz.tmp-2", ".piece-00002.npz.upload-3"):
        (tmp_path / stale).write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("kept")
    ResumableEncoding(tmp_path, _ids(5), _texts(5), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "notes.txt"]


def test_a_writer_needs_ids(tmp_path):
    with pytest.raises(UserError, match="at least one id"):
        ResumableEncoding(tmp_path, [], [], 2)
