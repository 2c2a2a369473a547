"""Retrieval with a GTR encoder: indexing a corpus, searching it, evaluating on BEIR.

An index directory (written by `build_index`, atomically) holds:

- `retriever.json`: the model directory it was built with, the corpus path, counts;
- `documents.jsonl.gz`: the indexed documents (`_id`, `title`, `text`) for display;
- `index/`: the `SearchIndex` (embeddings, ids, ScaNN searcher when approximate).
"""

import gzip
import json
import os
import shutil

from tqdm.auto import tqdm

from gtr_keras.corpus import check_qrels, load_corpus, load_qrels, load_queries
from gtr_keras.evaluation import cut_run, results_from_scores
from gtr_keras.files import atomic_directory
from gtr_keras.index import SearchIndex, ShardWriter

RETRIEVER_JSON = "retriever.json"
DOCUMENTS_FILE = "documents.jsonl.gz"
INDEX_SUBDIR = "index"
EVALUATION_DEPTH = 1000


def work_dir_for(index_dir):
    """Where `build_index` keeps finished shards until the index is complete."""
    return os.path.abspath(index_dir).rstrip(os.sep) + ".partial"


def build_index(encoder, corpus, index_dir, model_dir=None, kind="auto", batch_size=32, shard_size=2048,
                progress=None):
    """Encodes `corpus` and writes a searchable index directory.

    Embeddings are written shard by shard to `work_dir_for(index_dir)`; a run
    that is killed resumes from the last finished shard when started again with
    the same corpus and model. The index directory appears only when complete
    (a previous index stays in place until then).

    Args:
        encoder: the `Encoder` for documents.
        corpus: a `Corpus`.
        index_dir: directory to write.
        model_dir: the model directory, recorded so `search` can check it.
        kind: `"auto"` (exact below 20k documents, ScaNN above), `"exact"`, `"scann"`.
        batch_size: documents per forward pass.
        shard_size: documents per resumable shard.
        progress: show a progress bar (default: for corpora of 5000 or more).

    Example:
    >>> build_index(gtr_keras.load("models/gtr-base"), load_corpus("scifact"), "indexes/scifact")
    """
    if not len(corpus):
        raise ValueError("the corpus is empty: nothing to index")
    texts = corpus.joined()
    metadata = index_metadata(encoder, model_dir)
    writer = ShardWriter(work_dir_for(index_dir), corpus.ids, shard_size, metadata)
    pending = writer.pending_shards()
    show = progress if progress is not None else len(corpus) >= 5000
    done = len(corpus) - sum(s.end - s.start for s in pending)
    with tqdm(total=len(corpus), initial=done, disable=not show, desc="indexing", unit="doc") as bar:
        for shard in pending:
            writer.write(shard.number, encoder.encode_documents(texts[shard.start:shard.end], batch_size, False))
            bar.update(shard.end - shard.start)
    index = SearchIndex(corpus.ids, writer.assemble(), kind=kind)
    write_index(index_dir, index, corpus, metadata)
    shutil.rmtree(writer.work_dir)
    return index


def write_index(index_dir, index, corpus, metadata):
    """Writes an index directory (atomically) for a `SearchIndex` over `corpus`."""
    with atomic_directory(index_dir) as staging:
        index.save(os.path.join(staging, INDEX_SUBDIR))
        with gzip.open(os.path.join(staging, DOCUMENTS_FILE), "wt", encoding="utf-8") as f:
            for doc_id, title, text in zip(corpus.ids, corpus.titles, corpus.texts):
                f.write(json.dumps({"_id": doc_id, "title": title, "text": text}, ensure_ascii=False) + "\n")
        with open(os.path.join(staging, RETRIEVER_JSON), "w", encoding="utf-8") as f:
            json.dump({**metadata, "kind": index.kind, "num_documents": len(corpus)}, f, indent=2)


def index_metadata(encoder, model_dir):
    """What an index records about the model that built it."""
    return {"model_dir": os.path.abspath(model_dir) if model_dir else None,
            "document_length": encoder.document_length, "embedding_dim": encoder.embedding_dim}


class Retriever:
    """Answers text queries from an index directory.

    Args:
        encoder: the `Encoder` the index was built with.
        index: the `SearchIndex`.
        corpus: the indexed `Corpus` (for titles and snippets), optional.

    Example:
    >>> retriever = Retriever.load("indexes/scifact", gtr_keras.load("models/gtr-base"))
    >>> retriever.search(["does vitamin D prevent fractures?"], k=5)[0][0]["id"]
    """

    def __init__(self, encoder, index, corpus=None):
        self.encoder = encoder
        self.index = index
        self.corpus = corpus
        self._positions = {doc_id: i for i, doc_id in enumerate(corpus.ids)} if corpus else {}

    @classmethod
    def load(cls, index_dir, encoder):
        documents = os.path.join(index_dir, DOCUMENTS_FILE)
        if not os.path.exists(os.path.join(index_dir, RETRIEVER_JSON)):
            raise ValueError(f"{index_dir}: not an index directory (no {RETRIEVER_JSON}); build it with `gtr-keras index`")
        with open(os.path.join(index_dir, RETRIEVER_JSON), encoding="utf-8") as f:
            dim = json.load(f)["embedding_dim"]
        if dim != encoder.embedding_dim:
            raise ValueError(f"{index_dir} holds {dim}-d embeddings, the model makes {encoder.embedding_dim}-d ones")
        return cls(encoder, SearchIndex.load(os.path.join(index_dir, INDEX_SUBDIR)), load_corpus(documents))

    def search(self, queries, k=10):
        """Top-`k` hits per query: lists of `{"id", "score", "title", "text"}`."""
        ids, scores = self.index.search_ids(self.encoder.encode_queries(list(queries)), k)
        hits = []
        for row_ids, row_scores in zip(ids, scores):
            row = []
            for doc_id, score in zip(row_ids, row_scores):
                hit = {"id": doc_id, "score": float(score)}
                if doc_id in self._positions:
                    i = self._positions[doc_id]
                    hit.update(title=self.corpus.titles[i], text=self.corpus.texts[i])
                row.append(hit)
            hits.append(row)
        return hits


def load_dataset(dataset, split="test"):
    """A BEIR dataset's corpus, the judged queries of `split`, and checked qrels.

    Judgements naming unknown documents or queries are dropped and reported
    (the returned `QrelsReport`); evaluation goes on with the rest.
    """
    corpus = load_corpus(dataset)
    queries = load_queries(dataset)
    qrels, report = check_qrels(load_qrels(dataset, split), corpus.ids, queries)
    return corpus, {qid: queries[qid] for qid in qrels}, qrels, report


def gtr_run(encoder, corpus, queries, depth=EVALUATION_DEPTH, batch_size=32, ignore_identical_ids=True,
            progress=None, index=None):
    """A run `{qid: {docid: score}}` from GTR search of `corpus` (exact, unless `index` is given)."""
    query_ids = list(queries)
    if index is None:
        index = SearchIndex(corpus.ids, encoder.encode_documents(corpus.joined(), batch_size, progress), "exact")
    indices, scores = index.search(encoder.encode_queries([queries[q] for q in query_ids], batch_size), depth + 1)
    return cut_run(results_from_scores(query_ids, corpus.ids, indices, scores, ignore_identical_ids), depth)


def bm25_run(corpus, queries, depth=EVALUATION_DEPTH, ignore_identical_ids=True):
    """A run from the `bm25s` baseline (English stemming and stopwords)."""
    from gtr_keras.bm25 import BM25Retriever

    retriever = BM25Retriever()
    retriever.index(corpus.joined(), corpus.ids)
    query_ids = list(queries)
    ids, scores = retriever.search([queries[q] for q in query_ids], depth + 1)
    run = {}
    for qid, row_ids, row_scores in zip(query_ids, ids, scores):
        run[qid] = {d: float(s) for d, s in zip(row_ids, row_scores) if not (ignore_identical_ids and d == qid)}
    return cut_run(run, depth)


def mine_negatives(encoder, corpus, queries, qrels, depth=100, skip_top=0, per_query=10, batch_size=32,
                   progress=None):
    """Hard negatives from the model's own retrieval, judged positives excluded.

    For each judged query, the top `depth` documents of exact GTR search are
    taken, documents judged relevant (score > 0) are removed, the first
    `skip_top` of the rest are skipped (they are the likeliest unjudged
    positives), and the next `per_query` are kept.

    Args:
        encoder: the `Encoder` to retrieve with.
        corpus: the `Corpus`.
        queries: `{qid: text}` of the queries to mine for.
        qrels: `{qid: {docid: score}}`.
        depth: documents retrieved per query.
        skip_top: non-positive documents skipped at the top of each ranking.
        per_query: negatives kept per query.

    Returns:
        `{qid: [docid, ...]}` in rank order.

    Example:
    >>> corpus, queries, qrels, _ = load_dataset("nfcorpus", "train")
    >>> mined = mine_negatives(encoder, corpus, queries, qrels, depth=100, skip_top=3, per_query=5)
    """
    run = gtr_run(encoder, corpus, queries, depth, batch_size, ignore_identical_ids=True, progress=progress)
    mined = {}
    for qid in queries:
        positives = {d for d, score in qrels.get(qid, {}).items() if score > 0}
        ranked = [d for d in sorted(run[qid], key=lambda d: -run[qid][d]) if d not in positives]
        mined[qid] = ranked[skip_top:skip_top + per_query]
    return mined
