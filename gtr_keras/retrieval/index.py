"""`Index`: an index directory (or several searched as one) with the model that encodes its queries, as one
object: build, open, search (GTR, BM25 or both fused, with filters), get documents by id, add or replace
documents, delete them (or both in one update), compact, tune, check its files (as `gtr-keras check` does),
close.

It holds no logic of its own beyond choosing the step: building is `index_building.build_index`,
`index_building.index_embeddings` or `beam_pipeline.index_with_beam`; searching `Retriever` and
`HybridRetriever` (`filtered_search` for filters); updates `index_updates.update_index`; tuning
`tuning.tuner.tune`; its base `index_handle.IndexHandle` gets documents, checks its files and closes it.
`gtr-keras index` and `gtr-keras search` run through it, so an `Index` answers as the command line does
(`gtr-keras search --json` prints `search`'s hits). What it takes and answers is typed in `index_types`
(`Hit`, `Document`, `IndexUpdate`).
"""

import os
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Self, overload

import numpy as np

from gtr_keras.beir.readers import Corpus, check_corpus, load_corpus
from gtr_keras.engines.engine_index import EngineIndex
from gtr_keras.engines.targets import names_engine
from gtr_keras.errors import CheckpointError, DataError, MismatchError, UserError
from gtr_keras.filters.expressions import Filter
from gtr_keras.lexical.bm25 import BM25Retriever
from gtr_keras.lexical.bm25_side import corpus_in_index_order, load_bm25_side
from gtr_keras.lexical.fusion import Fusion, model_fusion
from gtr_keras.models.text_encoder import TextEncoder
from gtr_keras.retrieval import passages as windows
from gtr_keras.retrieval.hybrid_retriever import RETRIEVERS, HybridRetriever
from gtr_keras.retrieval.index_building import build_index, check_index_outputs, index_embeddings
from gtr_keras.retrieval.index_handle import IndexHandle
from gtr_keras.retrieval.index_types import FilterLike, Hit, IdsLike, IndexPaths, IndexUpdate, ModelLike, RerankerLike
from gtr_keras.retrieval.index_updates import update_index
from gtr_keras.retrieval.reranking import rerank as rerank_hits
from gtr_keras.retrieval.reranking import reranker_of
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.storage.embedding_files import EmbeddingFiles
from gtr_keras.storage.layout import read_model_record, search_settings
from gtr_keras.storage.quantized_vectors import vector_params
from gtr_keras.utils import files
from gtr_keras.utils.dimensions import check_dimensions
from gtr_keras.utils.locks import locks_output, output_lock
from gtr_keras.utils.records import check_positive_int
from gtr_keras.utils.text_files import query_inputs

GLOB_CHARACTERS = "*?["


def _encoder_of(model):
    from gtr_keras.saving import encoder_of  # the model's stack (Keras, TensorFlow) only for a model

    return encoder_of(model)


class Index(IndexHandle):
    """An index directory of gtr-keras (or several, shards of one corpus, searched as one) and its model.

    An index keeps document embeddings (exact or ScaNN search), the documents with their metadata, and a
    BM25 side of them; its model record (`retriever.json`) says which model encoded them, and a text query
    is encoded by that model only (checked by fingerprint). Searches, updates and tuning go to the
    directory: another process opening it sees each committed update whole, and an `Index` sees its own
    updates at once. `Index.open(path, model)` opens one (it calls the constructor), `Index.build` builds one.

    Args:
        path: an index directory, or a list of them (shards: one model, each id in one of them).
        model: the model the index was built with: a model directory or name (`"gtr_small_distilled_en"`,
            loaded when a text first needs encoding), a loaded encoder (`gtr_keras.load(DIR)`) or
            `GTRTextEmbedder`, or a function that loads one; None: the model the index records (its
            `model_dir`), loaded when a text query needs it. Vectors and BM25 need no model.

    Example:
    >>> index = gtr_keras.Index.build("indexes/scifact", "data/scifact", "gtr_small_distilled_en")
    >>> index.search(["does vitamin D prevent fractures?"], k=5, filter="year >= 2019")[0][0]["id"]
    >>> index.search(["vitamin D"], retriever="hybrid")
    >>> index.add("new.jsonl")  # adds, or replaces the documents whose id is in the index
    >>> index.delete("4983")  # one id; a list of ids, or a pathlib.Path of a file of ids
    >>> index.update(add="new.jsonl", delete=["17", "4983"]).added  # one commit; what it changed
    >>> index.get(["4983", "17"])[0]["text"], "17" in index
    >>> index.check().ok  # its files, as `gtr-keras check` verifies them
    >>> with gtr_keras.Index.open("indexes/scifact") as same:
    ...     same.search(["vitamin D"], k=3)
    """

    def __init__(self, path: IndexPaths, model: ModelLike | None = None):
        self.paths = [os.fspath(path)] if isinstance(path, (str, os.PathLike)) else [os.fspath(p) for p in path]
        if not self.paths:
            raise UserError("an Index needs at least one index directory")
        self.records = [read_model_record(directory) for directory in self.paths]  # not an index: one line
        self._model = model
        self._encoder = None
        self._search_params: dict[str, int] = {}
        self._reopen()

    @overload
    @classmethod
    def open(cls, path: IndexPaths, model: ModelLike | None = None, collection: None = None) -> Self: ...

    @overload
    @classmethod
    def open(cls, path: str, model: ModelLike | None = None, *, collection: str) -> EngineIndex: ...

    @classmethod
    def open(
        cls, path: IndexPaths, model: ModelLike | None = None, collection: str | None = None
    ) -> Self | EngineIndex:
        """The `Index` of an index directory, or of several searched as one: the way to open one (it calls
        the constructor, `Index(path, model)`); for an engine target (`qdrant:PATH`, `qdrant+http://HOST:PORT`,
        `milvus:PATH.db`, ...), its `collection` that `push` wrote, searched and updated through the engine
        (`EngineIndex`, docs/past-one-machine.md).

        Raises:
            DataError: not an index directory, or a damaged one (naming the file).
            MismatchError: shards of different models.
            UserError: `collection` without an engine target; a target without `collection`, or unreachable.
        """
        if isinstance(path, str) and names_engine(path):
            return EngineIndex(path, collection, None if model is None else lambda: _encoder_of(model))
        if collection is not None:
            raise UserError(f"collection: names a collection of an engine target (qdrant:PATH, ...), not of {path}")
        return cls(path, model)

    @classmethod
    @locks_output("path")
    def build(
        cls,
        path: str | os.PathLike[str],
        corpus: str | os.PathLike[str] | Corpus | None = None,
        model: ModelLike | None = None,
        *,
        embeddings: str | EmbeddingFiles | None = None,
        documents: str | os.PathLike[str] | Corpus | None = None,
        exact: bool = False,
        vectors: Literal["float32", "int8", "binary"] = "float32",
        rescore: Literal["int8", "binary"] | None = None,
        bm25: bool = True,
        batch_size: int = 32,
        piece_size: int = 2048,
        progress: bool | None = None,
        runner: str | None = None,
        beam_options: Sequence[str] = (),
        large_model: bool = False,
        file_rows: int = 50_000,
        dimensions: int | None = None,
        passages: str | tuple[int, int] | None = None,
        late_chunking: int | None = None,
    ) -> Self:
        """Builds an index directory at `path` (what `gtr-keras index` does, with its options) and opens it.

        From a corpus, encoded by `model` (resumable: a killed build started again resumes from its last
        finished piece), or from embedding files of `gtr-keras encode` or the Beam pipeline. Every input
        is checked before the model loads; the directory appears only when complete (an index there before
        stays until then), with a BM25 side of its documents unless `bm25=False`.

        Args:
            path: the index directory to write (replaces only an empty one or an index).
            corpus: a BEIR directory, a corpus file (`corpus.jsonl[.gz]`) or a `gtr_keras.Corpus`; with
                `runner`, also a glob of corpus files.
            model: as `Index` takes it; required with `corpus`; with `embeddings`, declares or checks
                their model (default: the one `gtr-keras encode` recorded beside them).
            embeddings: a glob of embedding files (`"emb/*.npy"`) instead of `corpus`.
            documents: with `embeddings`, their corpus (a file, a BEIR directory or a `Corpus`; the same
                ids, any order): its titles, texts and metadata are stored (for display and filters) and
                indexed with BM25.
            exact: exact search even above 20,000 documents (ScaNN's threshold).
            vectors: `"float32"`, or `"int8"` / `"binary"` codes for an exact index, rescored with float32.
            rescore: candidates rescored per query with `"int8"` or `"binary"` vectors.
            bm25: also index the documents with BM25 (for `retriever="bm25"` and `"hybrid"`).
            batch_size: documents per forward pass.
            piece_size: documents per resumable piece of the encoding.
            progress: show a progress bar (default: for 5,000 documents or more).
            runner: encode with an Apache Beam pipeline on this runner (`"DirectRunner"`,
                `"DataflowRunner"`, ...), `model` then a directory or name every worker loads.
            beam_options: Beam pipeline options, `"KEY=VALUE"` or `"KEY"` strings.
            large_model: one model copy per machine, shared by its Beam workers.
            file_rows: documents per embedding file of the Beam pipeline.
            dimensions: N, to index the first N coordinates of each embedding, renormalised
                (`utils.dimensions`): recorded, and the index's queries cut the same; None: all D.
            passages: `"TOKENS[:STRIDE]"` or `(tokens, stride)`: a corpus's documents cut into windows of TOKENS
                tokens every STRIDE (default TOKENS), searched as documents (docs/long-documents.md); recorded.
            late_chunking: with `passages` (not `runner`), N: each window's vector pooled from a forward pass of up
                to N tokens of its document (`--late-chunking --document-length N`, docs/late-chunking.md); recorded.

        Returns:
            The `Index`, with `model` loaded when it was used.

        Raises:
            UserError: both or neither of `corpus` and `embeddings`, `corpus` without `model`, an
                option that does not apply; `DataError` for a bad input file or `Corpus` value (naming its
                line or row and field, before the model loads); `MismatchError` for embeddings of another model.

        Example:
        >>> index = Index.build("indexes/scifact", "data/scifact", "gtr_small_distilled_en")
        >>> Index.build("indexes/msmarco", embeddings="emb/*.npy", documents="msmarco/corpus.jsonl")
        """
        if (corpus is None) == (embeddings is None):
            raise UserError("build an index from a corpus (with its model) or from embeddings: one of them, not both")
        if corpus is not None and model is None:
            raise UserError("a corpus is encoded by a model: pass model=")
        if documents is not None and embeddings is None:
            raise UserError("documents go with embeddings (a corpus is indexed with its own)")
        if runner is not None and embeddings is not None:
            raise UserError("runner encodes a corpus; embeddings are encoded already")
        setting = windows.passages_setting(passages)
        windows.check_late_chunking(late_chunking, setting, runner)
        if setting is not None and corpus is None:
            raise UserError("passages: a corpus's documents are cut into windows (not embeddings)")
        if dimensions is not None:
            check_dimensions(dimensions)
            if runner is not None:
                raise UserError("dimensions: not with a Beam runner; index its embedding files with dimensions")
        check_index_outputs(path, work_dir=embeddings is None and runner is None)  # Beam's: by its pipeline
        params = vector_params(vectors, rescore)
        kind = "exact" if exact or params else "auto"
        model_dir = model if isinstance(model, (str, os.PathLike)) else None
        encoder = None
        if embeddings is not None:
            embedding_files = embeddings if isinstance(embeddings, EmbeddingFiles) else EmbeddingFiles.open(embeddings)
            if isinstance(documents, (str, os.PathLike)):
                documents = corpus_in_index_order(load_corpus(documents), documents, embedding_files.ids)
            elif documents is not None:
                documents = corpus_in_index_order(check_corpus(documents), "documents", embedding_files.ids)
            encoder = None if model is None else _encoder_of(model)
            index_embeddings(embedding_files, path, encoder, model_dir, kind, documents, params, bm25, dimensions)
            encoder = encoder and encoder.truncated(dimensions)
        elif runner is not None:
            from gtr_keras.retrieval.encoding.beam_pipeline import index_with_beam  # Apache Beam, an extra

            if model_dir is None:
                raise UserError("runner: each Beam worker loads the model: pass its directory or name as model=")
            index_with_beam(
                corpus,
                path,
                model_dir,
                lambda: _encoder_of(model),
                kind,
                bm25,
                params,
                runner=runner,
                beam_options=beam_options,
                batch_size=batch_size,
                file_rows=file_rows,
                large_model=large_model,
                passages=passages,
            )
        else:
            if isinstance(corpus, (str, os.PathLike)):
                name = os.fspath(corpus)
                if any(char in name for char in GLOB_CHARACTERS) and not files.exists(name):
                    raise DataError(f"{name}: a glob of corpus files needs a Beam runner (runner='DirectRunner')")
            corpus = load_corpus(corpus) if isinstance(corpus, (str, os.PathLike)) else check_corpus(corpus)
            encoder = _encoder_of(model).truncated(dimensions)
            late = None if late_chunking is None else windows.LateRows(encoder, corpus, late_chunking)
            rows, setting = windows.window_corpus(corpus, encoder, passages)
            build_index(
                encoder, rows, path, model_dir, kind, batch_size, piece_size, progress, bm25, params, setting, late
            )
        index = cls.open(path, model)
        index._encoder = index._retriever.encoder = encoder  # checked by the build (None: none loaded)
        return index

    @property
    def encoder(self) -> TextEncoder:
        """The `Encoder` of the index's model, loaded (and checked as the model of every directory) when
        first needed.

        Raises:
            UserError: no model given and none recorded; `MismatchError`: the model given is another one.
        """
        self._check_open()
        if self._encoder is None:
            model = self._model if self._model is not None else self.records[0].get("model_dir")
            if model is None:
                raise UserError(
                    f"{self.paths[0]}: records no model directory; text queries need the model the index was "
                    "built with: Index.open(path, model=...)"
                )
            encoder = _encoder_of(model)
            for directory in self.paths:
                encoder = Retriever.encoder_for(directory, encoder)
            self._encoder = self._retriever.encoder = encoder
        return self._encoder

    @property
    def bm25(self) -> BM25Retriever:
        """The BM25 side (`BM25Retriever`) of the index's version this `Index` holds, loaded with that version
        (its arrays memory-mapped), or when first needed where it was then being rebuilt after its commit.

        Raises:
            DataError: the index has no BM25 side (built with `bm25=False`, or from embeddings without their
                documents), or a damaged one; `MismatchError`: a side of other documents: one an update is
                rebuilding (or was killed before rebuilding), or, where the index was updated since, one
                this `Index` can no longer load (open the index again).
        """
        if self._bm25 is None:
            try:
                self._bm25 = load_bm25_side(self.paths[0], self._retriever.index.ids, self._retriever.corpus)
            except MismatchError as error:
                if self._commit_points() == self._version:
                    raise  # the side of this version, rebuilt after its commit: there when the rebuild ends
                raise MismatchError(
                    f"{self.paths[0]}: updated since this Index loaded it, while its BM25 side was not yet of the "
                    "version loaded; open the index again (Index.open) for BM25 or hybrid search"
                ) from error
        return self._bm25

    @property
    def search_settings(self) -> dict[str, int]:
        """The dense index's search-time settings in effect: `{"num_leaves_to_search", "reorder_factor"}` for
        ScaNN, `{"rescore"}` for int8 or binary vectors, `{}` for exact float32; those `tune` recorded, else
        the index's own, or those `set_search_settings` set."""
        first = self._retriever.index.parts[0][0]  # every part takes the one setting (`set_search_settings`)
        return {name: first.params[name] for name in search_settings(first.kind, first.params)}

    @property
    def fusion(self) -> Fusion:
        """The `Fusion` of hybrid search by default: the model's own (`fusion.model_fusion`) when the model
        is a directory or name, given or recorded, else `Fusion()`."""
        model = self._model if isinstance(self._model, (str, os.PathLike)) else self.records[0].get("model_dir")
        if model is None:
            return Fusion()
        try:
            return model_fusion(model)
        except CheckpointError:  # a recorded directory that is no longer there
            return Fusion()

    def search(
        self,
        queries: Iterable[str] | np.ndarray,
        k: int = 10,
        filter: FilterLike | None = None,
        retriever: Literal["gtr", "bm25", "hybrid"] = "gtr",
        fusion: Fusion | None = None,
        rerank: RerankerLike | None = None,
        rerank_depth: int | None = None,
    ) -> list[list[Hit]]:
        """The top `k` hits of each query: per query, a list of `{"id", "score", "title", "text"}` best
        first (titles and texts where the index stores documents), what `gtr-keras search --json` prints; a
        passages index's: `k` distinct documents, each scored by its best window, that window its `"passage"`.

        Every search of the index runs here: GTR on texts (encoded by the index's model) or on vectors,
        BM25, or both fused, with or without a filter, and a reranker's second stage over any of them.

        Args:
            queries: a list of texts, or float32 query vectors `[n, D]` (GTR search, no model needed).
            k: hits per query.
            filter: only documents it allows: a clause (`"lang = fr"`, `"year >= 2019"`), a list of
                clauses (ANDed) or a `gtr_keras.Filter` (clauses and an allow-list of ids); docs/filters.md.
            retriever: `"gtr"`, `"bm25"` (the index's BM25 side) or `"hybrid"` (both, fused).
            fusion: the `gtr_keras.Fusion` of hybrid search (default: `self.fusion`).
            rerank: a reranker (`gtr_keras.load(RERANKER_DIR)`, a `Reranker` model, its model directory or
                cross-encoder checkpoint, or a function of no arguments that loads one) that reorders each query's
                first `rerank_depth` hits by its scores of the (query, document) pairs (`reranking.rerank`;
                docs/reranking.md); the hits' scores are then its scores.
            rerank_depth: first-stage hits reranked per query, at least `k` (default: `k`); the best `k` of them
                are returned. Without `rerank`, no hits are reranked.

        Raises:
            UserError: one line, before any search or model loads, for a query or filter with a lone surrogate,
                an unknown `retriever`, `k` not a positive int, `fusion` other than a `Fusion` or without
                `retriever="hybrid"`, `rerank_depth` not an int or below `k`, a bad clause or an unknown field, BM25
                on vectors or on several directories, or a reranker over vectors or an index without documents;
                `MismatchError`: the model given is not the index's, or the BM25 side is stale.

        Example:
        >>> index.search(["lift on a wing"], k=3, filter=["lang = en", "year >= 2019"])
        >>> index.search(["lift on a wing"], retriever="hybrid", fusion=gtr_keras.Fusion("rrf"))
        >>> index.search(query_vectors, k=10)
        >>> index.search(["lift on a wing"], k=10, rerank="models/minilm-reranker", rerank_depth=100)
        """
        if retriever not in RETRIEVERS:
            raise UserError(f"retriever must be one of {RETRIEVERS}, got {retriever!r}")
        k = check_positive_int(k, "k")
        if fusion is not None and not isinstance(fusion, Fusion):
            raise UserError(f"fusion must be a gtr_keras.Fusion (e.g. Fusion('rrf')), got {type(fusion).__name__}")
        if fusion is not None and retriever != "hybrid":
            raise UserError(f"fusion fuses the hits of retriever='hybrid'; retriever={retriever!r} has none to fuse")
        depth = check_positive_int(k if rerank_depth is None else rerank_depth, "rerank_depth")
        if depth < k:
            raise UserError(f"rerank_depth ({depth}) must be at least k ({k}): the best k of the reranked hits return")
        vectors, texts = query_inputs(queries)
        if rerank is not None and vectors is not None:
            raise UserError("rerank: a reranker reads query texts, not vectors")
        filter = windows.row_filter(self._passages, Filter.of(filter))  # a bad clause, before any search
        allowed = self._retriever.allowed(filter)  # an unknown field or a mismatched type, before the model loads
        if rerank is None:
            return self._first_stage(texts, vectors, k, filter, allowed, retriever, fusion)
        if self._retriever.corpus is None:
            raise UserError(
                f"rerank: {self.paths[0]} stores no document texts to rerank (built from embeddings without "
                "documents); rebuild it with its documents"
            )
        scorer = reranker_of(rerank)
        hits = self._first_stage(texts, None, depth, filter, allowed, retriever, fusion)
        return [row[:k] for row in rerank_hits(scorer, texts, hits, depth)]

    def _first_stage(self, texts, vectors, k, filter, allowed, retriever, fusion):
        if retriever == "gtr" and vectors is None:
            vectors = self.encoder.encode_queries(texts)
        search = lambda n: self._rows(texts, vectors, n, filter, allowed, retriever, fusion)  # noqa: E731
        return search(k) if self._passages is None else self._passages.search(search, k)

    def _rows(self, texts, vectors, k, filter, allowed, retriever, fusion):
        if retriever == "gtr":
            return self._retriever.hits(*self._retriever.search_ids(vectors, k, allowed))
        if vectors is not None:
            raise UserError(f"retriever {retriever!r} searches texts (BM25 has no vectors)")
        if len(self.paths) > 1:
            raise UserError(f"retriever {retriever!r} searches one index (several are shards of retriever='gtr')")
        bm25 = self.bm25
        if retriever == "hybrid":
            fusion = fusion or self.fusion  # a bad fusion record of the model's, before the model loads
            self._retriever.encoder = self.encoder
        return HybridRetriever(self._retriever, bm25, fusion).search(texts, k, retriever, filter)

    def update(
        self,
        add: str | os.PathLike[str] | Corpus | None = None,
        delete: IdsLike | os.PathLike[str] | None = None,
        *,
        embeddings: str | EmbeddingFiles | None = None,
        documents: str | os.PathLike[str] | Corpus | None = None,
        missing_ok: bool = False,
        compact: bool = False,
        batch_size: int = 32,
        progress: bool | None = None,
        passages: str | tuple[int, int] | None = None,
        late_chunking: int | None = None,
    ) -> IndexUpdate:
        """Adds (or replaces) and deletes documents in place, in one commit (`gtr-keras update` with
        `--corpus` or `--embeddings` and `--delete`).

        The update is one new generation of the index, committed whole or not at all: a reader that opened
        the index before keeps its version, one that opens it after sees every addition and deletion; this
        `Index` sees it at once. A compaction (asked, or past the thresholds) follows as a generation of its
        own, of the same documents. The BM25 side follows the documents. Every input (the ids to delete, the
        model, the metadata types) is checked before the model loads.

        Args:
            add: a corpus file, a BEIR directory or a `gtr_keras.Corpus`, encoded by the index's model;
                documents whose id is in the index replace those, the others are added.
            delete: the ids to delete: one id (a string, or an integer), a list (or any iterable) of ids, or a
                file of one id a line given as an `os.PathLike` (`pathlib.Path("withdrawn.txt")`, or
                `gtr_keras.utils.files.FilePath("gs://...")`, which keeps the scheme; a `str` is always one
                id). An id both added and deleted is refused.
            embeddings: embedding files (a glob) of the index's model instead of `add`.
            documents: with `embeddings`, their corpus (titles, texts, metadata); without it the documents
                the embeddings replace lose theirs, and the BM25 side is removed (a warning says so).
            missing_ok: skip ids of `delete` that are not in the index (else a `DataError` names the first).
            compact: then rewrite the index as one segment without its deleted rows (else done by itself past
                `segment_writer.MAX_SEGMENTS` segments or `MAX_DELETED_FRACTION` deleted rows).
            batch_size, progress: for encoding `add`.
            passages: checked against the index's (`MismatchError` naming it); a passages index cuts `add`'s
                documents into its windows whether given or not, and replaces or deletes a document's windows together.
            late_chunking: checked against the index's, as `passages` is; a late-chunking index late-chunks `add`'s.

        Returns:
            What changed (`IndexUpdate`): the ids added, replaced and deleted, and the generation, documents and
            segments the update left.

        Raises:
            UserError: both `add` and `embeddings`, nothing to do, bad ids, an id both added and deleted, or
                several directories (an update goes to one); `DataError`: an id to delete not in the index, a
                bad file or `Corpus` value (naming its line or row and field; the index left as it was);
                `MismatchError`: embeddings or a model of another model than the index's.

        Example:
        >>> index.update(add="new.jsonl", delete=["d1", "d7"])
        >>> index.update(embeddings="new/*.npy", documents="new/corpus.jsonl", delete=pathlib.Path("gone.txt"))
        """
        self._check_open()
        if add is not None and embeddings is not None:
            raise UserError("add a corpus (encoded by the index's model) or embeddings, not both")
        if add is None and embeddings is None and delete is None and not compact:
            raise UserError("update: nothing to do: pass add=, embeddings= or delete= (or compact=True)")
        if len(self.paths) > 1:
            raise UserError("an update goes to one index directory: open the shard that holds the documents")
        windows.check_setting(self.passages, windows.passages_setting(passages), self.paths[0])
        windows.check_setting(self.late_chunking, late_chunking, self.paths[0], windows.describe_late_chunking)
        if self._passages is not None:
            return windows.update_passages(self, add, embeddings, delete, missing_ok, compact, batch_size, progress)
        change = update_index(
            self.paths[0],
            embeddings=embeddings,
            corpus=add,
            documents=documents,
            encoder=(lambda: self.encoder) if add is not None else self._encoder,
            delete=delete,
            missing_ok=missing_ok,
            compact=True if compact else "auto",
            batch_size=batch_size,
            progress=progress,
        )
        self._reopen()
        return change

    def add(
        self,
        corpus: str | os.PathLike[str] | Corpus | None = None,
        *,
        embeddings: str | EmbeddingFiles | None = None,
        documents: str | os.PathLike[str] | Corpus | None = None,
        batch_size: int = 32,
        progress: bool | None = None,
    ) -> IndexUpdate:
        """Adds documents, replacing those whose id is in the index, in place: `update(add=corpus)` (or
        `update(embeddings=...)`), one commit.

        Args:
            corpus: a corpus file, a BEIR directory or a `gtr_keras.Corpus`, encoded by the index's model.
            embeddings: embedding files (a glob) of the index's model instead of `corpus`.
            documents: with `embeddings`, their corpus (titles, texts, metadata); without it the documents
                the embeddings replace lose theirs, and the BM25 side is removed (a warning says so).
            batch_size, progress: for encoding `corpus`.

        Returns:
            What changed (`IndexUpdate`: `added`, `replaced`).

        Raises:
            MismatchError: embeddings or a model of another model than the index's; `DataError`: a bad
                file, naming it; `UserError`: both or neither of `corpus` and `embeddings`.

        Example:
        >>> index.add("new.jsonl")
        >>> index.add(embeddings="new/*.npy", documents="new/corpus.jsonl")
        """
        if (corpus is None) == (embeddings is None):
            raise UserError("add a corpus (encoded by the index's model) or embeddings, not both")
        return self.update(corpus, embeddings=embeddings, documents=documents, batch_size=batch_size, progress=progress)

    def delete(self, ids: IdsLike | os.PathLike[str], missing_ok: bool = False) -> IndexUpdate:
        """Deletes documents in place: `update(delete=ids)`, one commit.

        Args:
            ids: one id (a string, or an integer): `delete("d5")` deletes the document `d5`; a list (or any
                iterable) of ids; or a file of one id a line, given as an `os.PathLike`
                (`pathlib.Path("withdrawn.txt")`: a `str` is always one id).
            missing_ok: skip ids that are not in the index (else a `DataError` names the first).

        Returns:
            What changed (`IndexUpdate`: `deleted`, those of `ids` that were in the index).

        Example:
        >>> index.delete("d5")
        >>> index.delete(["d1", "d7"])
        >>> index.delete(pathlib.Path("withdrawn.txt"))
        """
        return self.update(delete=ids, missing_ok=missing_ok)

    def compact(self) -> IndexUpdate:
        """Rewrites the index as one segment without its deleted rows (updates do so by themselves past
        `segment_writer.MAX_SEGMENTS` segments or `MAX_DELETED_FRACTION` deleted rows); returns the
        `IndexUpdate` (no document added, replaced or deleted)."""
        return self.update(compact=True)

    def tune(
        self,
        queries: Iterable[str] | np.ndarray | None = None,
        sample: int = 1000,
        target_recall: float = 0.95,
        k: int = 10,
        plot: str | None = None,
        build: bool = False,
    ) -> dict[str, Any]:
        """Measures the index's search settings against exact search and records the fastest that meets
        `target_recall` in the index (`gtr-keras tune`; `tuning.tuner.tune` has the other arguments), which
        its searches then use.

        Args:
            queries: held-out queries: a list of texts (encoded by the index's model, as `search` encodes
                them), or float32 query vectors `[n, D]`; None: `sample` of the index's rows.

        Returns:
            The record written (`setting`, `recall`, `qps`, ...).

        Raises:
            UserError: as `tuning.tuner.tune` says (nothing to tune, too few queries for `target_recall`, ...),
                checked before texts are encoded; `MismatchError`: the model given is not the index's.

        Example:
        >>> index.tune(sample=1000, target_recall=0.95)["setting"]
        {'num_leaves_to_search': 70, 'reorder_factor': 20, 'rescore_factor': 1}
        >>> index.tune(queries=[query for query in load_queries("data/scifact").values()])
        """
        from gtr_keras.tuning.tuner import check_request, tune

        self._check_open()
        if len(self.paths) > 1:
            raise UserError("tune measures one index directory: open each shard")
        with output_lock(self.paths[0]):
            if queries is not None:
                vectors, texts = query_inputs(queries)
                if texts is not None:
                    check_request(self.paths[0], target_recall, k, build, len(texts), sampled=False)
                    vectors = self.encoder.encode_queries(texts)
                queries = vectors
            record = tune(self.paths[0], queries, sample, target_recall, k, plot, build=build)
        self._reopen()
        return record
