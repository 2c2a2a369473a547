"""Writes small BEIR-layout collections for the tests."""

import json


def write_beir(directory, corpus, queries, qrels_rows, split="test"):
    """Writes `corpus` (a `Corpus`), `queries` (`{qid: text}`) and `qrels/SPLIT.tsv` to `directory`.

    `qrels_rows` are `(query id, document id, grade)`; calling again with another split adds it.
    Returns `directory`.
    """
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "corpus.jsonl", "w") as f:
        for i, t, x in zip(corpus.ids, corpus.titles, corpus.texts):
            f.write(json.dumps({"_id": i, "title": t, "text": x}) + "\n")
    with open(directory / "queries.jsonl", "w") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (directory / "qrels").mkdir(exist_ok=True)
    (directory / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels_rows)
    )
    return directory
