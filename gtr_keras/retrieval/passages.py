"""Passages of an index (`--passages TOKENS[:STRIDE]`, docs/long-documents.md): each document stored as rows, one
a token window (`models.token_windows`), searched as documents.

A window row's id is `"{doc_id}@{start}-{end}"` (its characters `[start, end)` in the document's `text`): a
document id holds no whitespace but may hold `@`, and the part after the last `@` is the window's, so row ids
never collide and each names its document. A row stores the document's title and metadata (filters allow a
document's windows together) and its window of text; the model and BM25 read `"title window"` (`Corpus.joined`),
so BM25 scores windows as GTR does. A search takes each document's best window (MaxP) and answers `k` distinct
documents, each hit with the `passage` that scored; a document's text is its windows', joined. With late chunking
(`--late-chunking`, docs/late-chunking.md) each row's vector is pooled from a forward pass of its whole document
(`LateRows`) instead of its window alone; searching is the same.
"""

import copy
import dataclasses
import os
from collections.abc import Callable, Iterable

from gtr_keras.beir.readers import Corpus, check_corpus, joined_document, load_corpus
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.models.late_chunking import LateChunks
from gtr_keras.models.token_windows import document_windows, parse_passages, piece_spans_of
from gtr_keras.retrieval.index_updates import deletion_ids, update_index
from gtr_keras.storage.layout import PASSAGES_FIELD


def passages_setting(value, document_length=None):
    """`{"tokens", "stride"}` of a passages setting as `models.token_windows.parse_passages` takes it, or None."""
    if value is None:
        return None
    tokens, stride = parse_passages(value, document_length)
    return {"tokens": tokens, "stride": stride}


def describe(setting):
    """A setting as its flag gives it: `--passages 64:32`, or `no --passages`."""
    return f"--passages {setting['tokens']}:{setting['stride']}" if setting else "no --passages"


def describe_late_chunking(late_chunking):
    """A late-chunking setting as its flags give it: `--late-chunking --document-length 2048`, or
    `no --late-chunking`."""
    return f"--late-chunking --document-length {late_chunking}" if late_chunking else "no --late-chunking"


def check_setting(recorded, given, where, describe=describe):
    """Refuses (`MismatchError`, naming the setting as `describe` says it) a passages (or late-chunking) setting
    `given` (None: not given) other than the one the index `where` records."""
    if given is not None and given != recorded:
        raise MismatchError(f"{where}: built with {describe(recorded)}, but {describe(given)} is given")


def check_late_chunking(late_chunking, setting, runner=None):
    """Refuses (`UserError`) before any work a `late_chunking` (the tokens of a forward pass, `--document-length`;
    None: none) other than an integer of at least 2 that goes with a passages `setting` (`LateRows` checks it
    against the model's budget), and not with a Beam `runner` (None: none)."""
    if late_chunking is None:
        return
    if setting is None:
        raise UserError("late_chunking: pools the windows of passages: cut the documents with passages= too")
    if runner is not None:
        raise UserError("late_chunking: not with a Beam runner (its pipeline encodes passages without it)")
    if isinstance(late_chunking, bool) or not isinstance(late_chunking, int) or late_chunking < 2:
        raise UserError(f"late_chunking: the tokens of a forward pass, an integer such as 2048, got {late_chunking!r}")


def shards_setting(paths, records):
    """The passages setting the model `records` of shards `paths` share (None: none); `MismatchError` naming
    the first shard whose setting is another than the first's."""
    setting = records[0].get(PASSAGES_FIELD)
    for path, record in zip(paths[1:], records[1:]):
        if record.get(PASSAGES_FIELD) != setting:
            raise MismatchError(
                f"{path}: built with {describe(record.get(PASSAGES_FIELD))}, but the shard {paths[0]} with "
                f"{describe(setting)}; shards searched together share their passages"
            )
    return setting


def row_filter(passages, filter):
    """`filter` (a `Filter` or None) as the row mask of an index (`MetadataColumns.allowed`) reads it: for a
    passages index (`passages` its `Passages`; None: not one), its allow-list of document ids made the ids of
    those documents' window rows (an id not in the index allows nothing, as elsewhere).

    Example:
    >>> row_filter(Passages(["d1@0-301", "d1@152-455", "d2@0-80"], None), Filter(ids=["d1"])).ids
    ['d1@0-301', 'd1@152-455']
    """
    if passages is None or filter is None or filter.ids is None:
        return filter
    rows = copy.copy(filter)
    rows.ids = passages.rows_of(filter.ids, missing_ok=True)
    return rows


def row_id(doc_id, start, end):
    return f"{doc_id}@{start}-{end}"


def split_row_id(row):
    """`(doc_id, start, end)` of a window row's id."""
    doc_id, _, span = row.rpartition("@")
    start, _, end = span.partition("-")
    return doc_id, int(start), int(end)


def window_corpus(corpus, encoder, passages):
    """`(rows, setting)`: `corpus`'s documents cut by `encoder`'s tokenizer into the windows of `passages` (as
    `passages_setting` takes it, checked against the model's budget): a `Corpus` of window rows (ids `row_id`), each
    with its document's title and metadata, and the setting; `(corpus, None)` for `passages` None. A window holds
    at most what the document's title leaves of the model's budget (`encoder.document_length`, EOS included), as
    the model reads it: `"title window"` tokenized alone (a document whose windows do not is cut into shorter ones).

    Example:
    >>> rows, setting = window_corpus(Corpus(["d1"], [""], [long_text]), encoder, "64:32")
    >>> rows.ids[:2], setting
    (['d1@0-301', 'd1@152-455'], {'tokens': 64, 'stride': 32})
    """
    if passages is None:
        return corpus, None
    setting = passages if isinstance(passages, dict) else passages_setting(passages, encoder.document_length)
    spans = piece_spans_of(encoder)
    limit = encoder.document_length - 1
    budgets = [limit - (spans.count(title) if title else 0) for title in corpus.titles]
    fits = lambda i, w: spans.count(joined_document(corpus.titles[i], corpus.texts[i][w.start : w.end])) <= limit  # noqa: E731
    windows = document_windows(spans, corpus.texts, setting["tokens"], setting["stride"], budgets, fits)
    ids, titles, texts, metadata = [], [], [], []
    for i, doc_windows in enumerate(windows):
        for window in doc_windows:
            ids.append(row_id(corpus.ids[i], window.start, window.end))
            titles.append(corpus.titles[i])
            texts.append(corpus.texts[i][window.start : window.end])
            metadata.append(corpus.metadata[i] if corpus.metadata is not None else {})
    return Corpus(ids, titles, texts, metadata if corpus.metadata is not None else None), setting


class LateRows:
    """The late-chunk vectors (`models.late_chunking.LateChunks`) of window rows of `documents`, as a passages
    index's build and updates encode them with late chunking instead of `encode_documents`.

    Args:
        encoder: the Keras model's `Encoder` (truncated to the index's dimensions where it has them).
        documents: the `Corpus` of the documents the rows are windows of (as `window_corpus` cuts them).
        document_length: tokens of a forward pass (`LateChunks`): at least the model's budget, else `UserError`.

    Example:
    >>> late = LateRows(encoder, corpus, 2048)
    >>> rows, _ = window_corpus(corpus, encoder, "64:32")
    >>> late.encode(rows.ids[:10], batch_size=32).shape
    (10, 768)
    """

    def __init__(self, encoder, documents: Corpus, document_length: int):
        self.late = LateChunks(encoder, document_length)
        self.document_length = document_length
        self.documents = documents
        self._positions = {doc_id: i for i, doc_id in enumerate(documents.ids)}

    def encode(self, row_ids, batch_size):
        """The vectors of `row_ids` (each document's rows together, as `window_corpus` orders them), in their
        order. `batch_size` counts documents of the model's budget: a forward pass holds as many tokens, in
        `document_length`-token segments (at least one)."""
        windows: dict[str, list[tuple[int, int]]] = {}
        for row in row_ids:
            doc_id, start, end = split_row_id(row)
            windows.setdefault(doc_id, []).append((start, end))
        positions = [self._positions[doc_id] for doc_id in windows]
        segments = max(batch_size * self.late.encoder.document_length // self.document_length, 1)
        return self.late.encode(
            [self.documents.titles[i] for i in positions],
            [self.documents.texts[i] for i in positions],
            list(windows.values()),
            segments,
        )


class Passages:
    """The documents of a passages index's rows, in the order of their first rows.

    Args:
        row_ids: the index's live row ids, in row order.
        corpus: the rows' stored `Corpus` (`Retriever.corpus`), or None.

    Example:
    >>> passages = Passages(index.ids, retriever.corpus)
    >>> passages.ids[:2], passages.document("d1")["text"][:20]
    """

    def __init__(self, row_ids: Iterable[str], corpus: Corpus | None):
        self.rows: dict[str, list[str]] = {}
        for row in row_ids:
            self.rows.setdefault(split_row_id(row)[0], []).append(row)
        self.corpus = corpus
        self._positions = {row: i for i, row in enumerate(corpus.ids)} if corpus is not None else {}
        self._documents = {}

    @property
    def ids(self):
        return list(self.rows)

    def document(self, doc_id):
        """The `Document` of `doc_id`: its title and metadata (its rows'), and its windows' texts joined."""
        if doc_id in self._documents:
            document = self._documents[doc_id]
            return {**document, "metadata": dict(document["metadata"])}
        rows = sorted(self.rows[doc_id], key=lambda row: split_row_id(row)[1])
        if rows[0] not in self._positions:
            return {"id": doc_id, "title": "", "text": "", "metadata": {}}
        text, first = "", self._positions[rows[0]]
        for row in rows:  # each window starts within the text its windows before cover
            text += self.corpus.texts[self._positions[row]][len(text) - split_row_id(row)[1] :]
        metadata = dict(self.corpus.metadata[first]) if self.corpus.metadata is not None else {}
        document = {"id": doc_id, "title": self.corpus.titles[first], "text": text, "metadata": metadata}
        self._documents[doc_id] = document
        return document

    def rows_of(self, doc_ids, where=lambda i: f"delete[{i}]", missing_ok=False):
        """The row ids of the documents `doc_ids`; `DataError` naming (by `where`) the first not in the index,
        unless `missing_ok`."""
        rows = []
        for i, doc_id in enumerate(doc_ids):
            if doc_id not in self.rows and not missing_ok:
                raise DataError(f"{where(i)}: id {doc_id!r} is not in the index")
            rows.extend(self.rows.get(doc_id, ()))
        return rows

    def documents(self, row_hits, k):
        """Per query, the best `k` distinct documents of its row hits (best first), each scored by its best
        window's (MaxP), with that window's `passage` `{"start", "end"}` and the document's title and text."""
        answers = []
        for row in row_hits:
            hits, seen = [], set()
            for hit in row:
                doc_id, start, end = split_row_id(hit["id"])
                if doc_id in seen:
                    continue
                seen.add(doc_id)
                document = self.document(doc_id)
                hits.append(
                    {
                        "id": doc_id,
                        "score": hit["score"],
                        **({"title": document["title"], "text": document["text"]} if "text" in hit else {}),
                        "passage": {"start": start, "end": end},
                    }
                )
                if len(hits) == k:
                    break
            answers.append(hits)
        return answers

    def search(self, search: Callable[[int], list], k: int):
        """`documents(search(depth), k)` at a depth of rows that gives `k` documents a query where the index
        (or its filter) allows them: `2 k` times the windows a document has on average, then four times more
        until it does."""
        rows = sum(len(rows) for rows in self.rows.values())
        depth = min(2 * k * -(-rows // max(len(self.rows), 1)), max(rows, 1))
        while True:
            row_hits = search(depth)
            answers = self.documents(row_hits, k)
            if depth >= rows or all(len(a) >= k or len(r) < depth for a, r in zip(answers, row_hits)):
                return answers
            depth = min(depth * 4, rows)


def update_passages(index, corpus, embeddings, delete, missing_ok, compact, batch_size, progress):
    """`Index.update` of a passages index, in one commit (`index_updates.update_index` over its window rows):
    `corpus`'s documents cut into the index's windows replace all the rows of those in the index (a window
    unchanged is replaced by itself; late-chunked where the index records `late_chunking`), and every row of
    `delete`'s documents is deleted.

    Args:
        index: the `Index`, which is reloaded after the update.
        corpus, embeddings, delete, missing_ok, compact, batch_size, progress: as `Index.update` takes them.

    Returns:
        The `IndexUpdate`, its `added`, `replaced` and `deleted` the documents' ids, `documents` their number.

    Raises:
        UserError: `embeddings` (windows are cut from texts), a document both added and deleted; `DataError`: an
            id to delete not in the index (unless `missing_ok`), naming it, or a bad corpus; nothing is written.
    """
    where_index, passages = index.paths[0], index._passages
    if embeddings is not None:
        raise UserError(f"{where_index}: a passages index is updated from a corpus (cut into its windows)")
    if isinstance(corpus, (str, os.PathLike)):
        corpus = load_corpus(corpus)
    elif corpus is not None:
        corpus = check_corpus(corpus)
    doc_ids, where = deletion_ids(delete)
    added = [] if corpus is None else list(corpus.ids)
    both = set(added) & set(doc_ids)
    if both:
        raise UserError(f"id {sorted(both)[0]!r} is both added and deleted")
    rows = passages.rows_of(doc_ids, where or (lambda i: f"delete[{i}]"), missing_ok)
    encoder = index.encoder if corpus is not None else None
    late = None
    if corpus is not None:
        late = LateRows(encoder, corpus, index.late_chunking) if index.late_chunking else None
        corpus, _ = window_corpus(corpus, encoder, index.passages)
        kept = set(corpus.ids)
        rows += [row for row in passages.rows_of(added, missing_ok=True) if row not in kept]
    compact = True if compact else "auto"
    change = update_index(
        where_index, None, corpus, encoder, None, rows, False, compact, batch_size, progress, late=late
    )
    index._reopen()
    return dataclasses.replace(
        change,
        added=tuple(doc_id for doc_id in added if doc_id not in passages.rows),
        replaced=tuple(doc_id for doc_id in added if doc_id in passages.rows),
        deleted=tuple(doc_id for doc_id in doc_ids if doc_id in passages.rows),
        documents=len(index),
    )
