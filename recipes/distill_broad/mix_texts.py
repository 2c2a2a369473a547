"""Mixes the distillation texts of the broad recipe into one pairs file and one single-text file.

    python recipes/distill_broad/mix_texts.py BROAD_DIR DATA_DIR OUT_DIR [--gcide N]

Pairs (`OUT_DIR/pairs.jsonl.gz`): every pair `extract_texts.py` wrote into BROAD_DIR (WordNet, FOLDOC,
Jargon File, manual pages; of GCIDE a seeded sample of N, default 80,000, of its 174,066 senses) and every
Debian package (short -> long description) pair of DATA_DIR/debian-descriptions. Single texts
(`OUT_DIR/singles.jsonl.gz`): WordNet's usage examples and the 5,000 MS MARCO passages of
DATA_DIR/msmarco-dl19-subset. A pair or text equal (case-folded, whitespace collapsed) to a query, title
or document of an evaluation collection (SciFact, NFCorpus, Cranfield, CISI in DATA_DIR) is dropped.
Each file is permuted with `random.Random(0)` (the distillation's shuffle buffer then mixes sources from
the first batch), gzip'd with mtime 0 and no name in the header and written atomically: the same inputs
give the same bytes. A missing file or a record without its fields is exit 2, one line naming it. Counts
per source are printed.
"""

import argparse
import os
import random

from extract_texts import write_jsonl_gz

from gtr_keras.beir import load_corpus, load_queries
from gtr_keras.errors import run_script
from gtr_keras.utils.text_files import iter_jsonl, str_field

EVALUATION = ("scifact", "nfcorpus", "cranfield", "cisi")
BROAD_PAIRS = ("wordnet-pairs", "gcide-pairs", "foldoc-pairs", "jargon-pairs", "manpages-pairs")


def read_records(path, fields):
    """The records of a `.jsonl[.gz]` file, each with the string `fields` (a `DataError` naming the file, line
    and field otherwise)."""
    records = []
    for line_no, record in iter_jsonl(path):
        for field in fields:
            str_field(path, line_no, record, field, required=True)
        records.append(record)
    return records


def key(text):
    return " ".join(text.casefold().split())


def evaluation_texts(data):
    """Every query, title and document text of the evaluation collections, case-folded."""
    seen = set()
    for name in EVALUATION:
        seen.update(key(text) for text in load_queries(os.path.join(data, name)).values())
        corpus = load_corpus(os.path.join(data, name))
        seen.update(key(text) for text in corpus.titles + corpus.texts)
    seen.discard("")
    return seen


def write(path, records):
    records = list(records)
    random.Random(0).shuffle(records)
    return write_jsonl_gz(path, records)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("broad")
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--gcide", type=int, default=80_000, help="GCIDE senses sampled (seed 0)")
    args = parser.parse_args()
    held_out = evaluation_texts(args.data)
    os.makedirs(args.out, exist_ok=True)

    pairs, singles, counts = [], [], {}

    def take(source, records, text_fields):
        kept = [r for r in records if not any(key(r[field]) in held_out for field in text_fields)]
        counts[source] = (len(records), len(kept))
        return kept

    for name in BROAD_PAIRS:
        records = read_records(os.path.join(args.broad, f"{name}.jsonl.gz"), ("_id", "query", "positive"))
        if name == "gcide-pairs" and len(records) > args.gcide:
            records = random.Random(0).sample(sorted(records, key=lambda r: r["_id"]), args.gcide)
        pairs += take(name, records, ("query", "positive"))
    debian = read_records(os.path.join(args.data, "debian-descriptions", "pairs.jsonl.gz"), ("query", "positive"))
    pairs += take(
        "debian-pairs",
        [{"_id": f"debian:{r['_id']}", "query": r["query"], "positive": r["positive"]} for r in debian],
        ("query", "positive"),
    )
    singles += take(
        "wordnet-examples",
        read_records(os.path.join(args.broad, "wordnet-examples.jsonl.gz"), ("_id", "text")),
        ("text",),
    )
    msmarco = load_corpus(os.path.join(args.data, "msmarco-dl19-subset"))
    singles += take(
        "msmarco-passages",
        [{"_id": f"msmarco:{i}", "text": text} for i, text in zip(msmarco.ids, msmarco.texts)],
        ("text",),
    )
    for source, (read, kept) in counts.items():
        print(f"{source}: {kept:,} of {read:,} kept")
    print(
        f"{write(os.path.join(args.out, 'pairs.jsonl.gz'), pairs):,} pairs, "
        f"{write(os.path.join(args.out, 'singles.jsonl.gz'), singles):,} single texts"
    )


if __name__ == "__main__":
    run_script(main)
