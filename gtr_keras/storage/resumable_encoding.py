"""`ResumableEncoding`: the resumable embedding output of the indexing command, written a piece at a time (and of the
distillation teacher's cache), which refuses to resume from embeddings of other texts, ids, settings
or another model.
"""

import fnmatch
import json
import math
import os
import zipfile
from typing import NamedTuple

import numpy as np

from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.storage.layout import check_embeddings, check_ids
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_file
from gtr_keras.utils.records import (
    check_positive_int,
    describe_change,
    read_json_object,
    strings_sha256,
    unreadable_reason,
)

_MANIFEST_JSON = "manifest.json"
_PIECE_FORMAT = 2
# What a killed piece write leaves: `atomic_file`'s staging file and, on another file system, an upload not yet
# moved into place.
_STALE_PIECES = (".piece-*.tmp-*", ".piece-*.upload-*")
_MANIFEST_FIELDS = ("piece_format", "num_rows", "piece_size", "ids_sha256")
RESUMABLE_ENCODING_DIRECTORY = files.DirectoryKind(
    "a ResumableEncoding's pieces", (_MANIFEST_JSON,), (_MANIFEST_JSON, "piece-*.npz", *_STALE_PIECES)
)


class Piece(NamedTuple):
    """Piece `number` holds embedding rows `[start, end)`."""

    number: int
    start: int
    end: int


class ResumableEncoding:
    """Resumable storage for the embeddings of a corpus, one file per piece (`piece-*.npz`).

    Piece `i` holds rows `[i * piece_size, min((i + 1) * piece_size, N))` in
    `work_dir/piece-0000i.npz`, together with the SHA-256 of the texts those
    rows were encoded from. Each piece's file is written through a temporary file
    and an atomic rename, so a piece file on disk is always complete. The
    first `ResumableEncoding` on a directory writes `manifest.json` with N,
    `piece_size`, the SHA-256 of the id list and `metadata`. A later
    `ResumableEncoding` on the same directory resumes from the pieces already there,
    but only if all of these match and the texts of every finished piece are
    the ones it was encoded from; otherwise it raises a `MismatchError` that
    names what changed, rather than silently mixing embeddings of different
    texts or models: delete `work_dir` to start over.

    Args:
        work_dir: str or path-like. Created if missing.
        ids: sequence of str, the corpus ids in row order.
        texts: sequence of str (or bytes), the exact texts encoded, one per id;
            piece `i` must be encoded from `texts[piece.start:piece.end]`.
        piece_size: int, rows per piece (`--piece-size`).
        metadata: JSON-serialisable dict of whatever else determines the
            embeddings (the model's fingerprint and settings), checked on
            resume in its order; keys must differ from the manifest's own
            (`piece_format`, `num_rows`, `piece_size`, `ids_sha256`).

    Raises:
        MismatchError: `work_dir` holds pieces of other ids, texts, piece size
            or metadata.
        DataError: a manifest or piece file there cannot be read.

    Example:
    >>> model = {"model_sha256": fingerprint(encoder)}
    >>> writer = ResumableEncoding("work_dirs/scifact", ids, texts, 4096, model)
    >>> for piece in writer.pending_pieces():
    ...     writer.write(piece.number, encoder.encode_documents(texts[piece.start:piece.end]))
    >>> write_search_index(writer, "indexes/scifact")  # reads the pieces back one at a time
    """

    def __init__(self, work_dir, ids, texts, piece_size, metadata=None):
        self.piece_size = check_positive_int(piece_size, "piece_size")
        ids = check_ids(ids)
        if not ids:
            raise UserError("ResumableEncoding needs at least one id.")
        if len(texts) != len(ids):
            raise UserError(f"Got {len(texts)} texts for {len(ids)} ids.")
        metadata = json.loads(json.dumps(metadata or {}))
        reserved = sorted(set(metadata) & set(_MANIFEST_FIELDS))
        if reserved:
            raise UserError(f"metadata must not hold the manifest's own fields {reserved}.")
        self.work_dir = os.fspath(work_dir)
        self.ids = ids
        self.num_rows = len(ids)
        self._texts = texts
        manifest = {
            "piece_format": _PIECE_FORMAT,
            "num_rows": self.num_rows,
            "piece_size": self.piece_size,
            "ids_sha256": strings_sha256(ids),
            **metadata,
        }
        files.makedirs(self.work_dir)
        names = files.listdir(self.work_dir)
        for stale in names:
            if any(fnmatch.fnmatchcase(stale, pattern) for pattern in _STALE_PIECES):
                files.remove(os.path.join(self.work_dir, stale))
        manifest_path = os.path.join(self.work_dir, _MANIFEST_JSON)
        if files.exists(manifest_path):
            recorded = read_json_object(manifest_path, self._start_over)
            if recorded.get("piece_format") != _PIECE_FORMAT:
                raise MismatchError(f"{self.work_dir}: pieces of another version of gtr-keras; {self._start_over}")
            change = describe_change(recorded, dict.fromkeys(recorded) | manifest, "this run has")
            if change:
                raise MismatchError(
                    f"{self.work_dir}: these pieces were encoded from other inputs or settings "
                    f"({change}); {self._start_over}"
                )
            self._check_finished_pieces(set(names))
        elif any(fnmatch.fnmatchcase(name, "piece-*.npz") for name in names):
            raise MismatchError(
                f"{self.work_dir}: piece files but no {_MANIFEST_JSON} saying what they were encoded "
                f"from; {self._start_over}"
            )
        else:
            payload = json.dumps(manifest, indent=2).encode("utf-8")
            with atomic_file(manifest_path) as f:
                f.write(payload)

    @property
    def _start_over(self):
        return f"delete {self.work_dir} to start over"

    @property
    def num_pieces(self):
        return math.ceil(self.num_rows / self.piece_size)

    def piece(self, number):
        """The `Piece` with this number."""
        if not 0 <= number < self.num_pieces:
            raise ValueError(f"Piece number must be in [0, {self.num_pieces}), got {number}.")
        start = number * self.piece_size
        return Piece(number, start, min(start + self.piece_size, self.num_rows))

    def _path(self, number):
        return os.path.join(self.work_dir, f"piece-{number:05d}.npz")

    def _texts_sha256(self, piece):
        return strings_sha256(self._texts[piece.start : piece.end])

    def _read(self, number, key):
        path = self._path(number)
        try:
            with files.open(path) as f, np.load(f) as stored:
                return stored[key]
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
            raise DataError(f"{path}: unreadable piece ({unreadable_reason(e, path)}); {self._start_over}") from e

    def _check_finished_pieces(self, names):
        """Checks the texts of every finished piece; `names` lists the work directory."""
        for number in range(self.num_pieces):
            piece = self.piece(number)
            if os.path.basename(self._path(number)) not in names:
                continue
            if str(self._read(number, "texts_sha256")) != self._texts_sha256(piece):
                raise MismatchError(
                    f"{self.work_dir}: piece {number} was encoded from other texts (documents "
                    f"{piece.start}-{piece.end - 1}: one or more changed since); {self._start_over}"
                )

    def pending_pieces(self):
        """The `Piece`s not yet written, in order."""
        done = set(files.listdir(self.work_dir))
        return [self.piece(i) for i in range(self.num_pieces) if os.path.basename(self._path(i)) not in done]

    def write(self, number, embeddings):
        """Stores the `[end - start, D]` embeddings of piece `number`, encoded from its texts."""
        piece = self.piece(number)
        embeddings = check_embeddings(embeddings, f"embeddings for piece {number}")
        if embeddings.shape[0] != piece.end - piece.start:
            raise UserError(
                f"Piece {number} holds rows [{piece.start}, {piece.end}), got {embeddings.shape[0]} embedding rows."
            )
        with atomic_file(self._path(number)) as f:
            np.savez(f, embeddings=embeddings, texts_sha256=np.array(self._texts_sha256(piece)))

    def chunks(self):
        """Each piece's float32 `[rows, D]` embeddings in order, read one at a time (all must be written)."""
        pending = self.pending_pieces()
        if pending:
            raise UserError(
                f"{len(pending)} of {self.num_pieces} pieces in {self.work_dir} are not "
                f"written yet, the first is piece {pending[0].number}."
            )
        dims = None
        for number in range(self.num_pieces):
            piece, rows = self.piece(number), self._read(number, "embeddings")
            dims = rows.shape[-1] if dims is None else dims
            expected = (piece.end - piece.start, dims)
            if rows.shape != expected:
                raise DataError(f"{self._path(number)} has shape {rows.shape}, expected {expected}; {self._start_over}")
            yield rows

    @property
    def dims(self):
        """D, the embedding size of the written pieces."""
        return self._read(0, "embeddings").shape[-1]

    def assemble(self):
        """Returns all pieces concatenated: float32 `[N, D]` (`chunks` reads them without holding them all)."""
        return np.concatenate(list(self.chunks()))
