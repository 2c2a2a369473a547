"""Vocabulary study: SentencePiece pieces per whitespace word, the bundled tokenizer's texts vs broad text.

    nice -n 19 python recipes/distill_broad/vocab_study.py --broad BROAD_DIR [--data ../shared/data]
        [--work /tmp/vocab_study] [--sizes 16000 24000 32000] [--markdown TABLES.md] [--compare SPM_FILE]

BROAD_DIR is what `extract_texts.py` wrote. Trains case-folded unigram SentencePiece models with
`gtr_keras.models.gtr.gtr_tokenizer.train_sentencepiece(..., case_folding=True, num_threads=1)` (T5 special ids,
`nmt_nfkc_cf`, character coverage 0.9995, 200,000 input sentences shuffled, hard_vocab_limit off)
on a seeded sample (`random.Random(0)`) of the distinct texts (queries and documents) of:

- the broad texts (every file of BROAD_DIR),
- all Debian description pairs (DATA/debian-descriptions/pairs.jsonl.gz, query and long description),
- the MS MARCO passages of DATA/msmarco-dl19-subset/corpus.jsonl ("title text"),

and, as a control, the texts the 16k tokenizer bundled until issue #26 was trained on
(recipes/distill_cpu/run.sh: 30,000 Debian pairs sampled with seed 0, then the MS MARCO passages, all
distinct texts). Then it counts pieces per whitespace word (`len(pieces) / len(text.split())`, summed over
texts) on the first 2,000 documents ("title text") of each evaluation collection's corpus and of the Debian
descriptions (long descriptions), for each model and for `--compare`'s. Evaluation texts are only measured,
never trained on.
"""

import argparse
import hashlib
import os
import random
import sys
import time

import sentencepiece as spm

from gtr_keras.beir.readers import CORPUS_FILES, in_collection
from gtr_keras.errors import run_script
from gtr_keras.models.gtr.gtr_tokenizer import train_sentencepiece
from gtr_keras.utils.text_files import iter_jsonl

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COLLECTIONS = ("scifact", "nfcorpus", "cranfield", "cisi")
MEASURED = 2000
SENTENCES = 200_000  # train_sentencepiece's seed_sentences and the distill loop's _SENTENCEPIECE_TEXTS
SEED = 0


def records(path):
    """The JSON objects of a `.jsonl[.gz]` file (a `DataError` naming the file and line for a bad one)."""
    return (record for _, record in iter_jsonl(path))


def corpus_file(directory):
    return in_collection(directory, CORPUS_FILES)


def joined(record):
    """A BEIR record as the project embeds it: "title text" (just the text without a title)."""
    title = (record.get("title") or "").strip()
    return f"{title} {record['text']}".strip() if title else record["text"].strip()


def texts_of(path):
    """The texts of a distillation texts file: query and positive of a pair, the text of a single."""
    for record in records(path):
        if "query" in record:
            yield record["query"]
            yield record["positive"]
        else:
            yield joined(record)


def distinct(texts):
    seen = set()
    return [t for t in texts if t.strip() and not (t in seen or seen.add(t))]


def train(texts, path, size):
    """A case-folded unigram model as `gtr-keras distill` trains one, on one thread. Returns seconds."""
    start = time.time()
    train_sentencepiece(texts, path + ".partial", size, seed_sentences=SENTENCES, case_folding=True, num_threads=1)
    os.replace(path + ".partial", path)
    return time.time() - start


def pieces_per_word(processor, texts):
    texts = [t.strip() for t in texts]  # GTRTokenizer strips before SentencePiece
    pieces = sum(len(ids) for ids in processor.encode(texts, num_threads=1))
    words = sum(len(t.split()) for t in texts)
    whole = sum(1 for t in texts for w in t.split() if len(processor.encode(w)) == 1)
    return pieces / words, whole / words


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broad", required=True, help="the output directory of extract_texts.py")
    parser.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data"))
    parser.add_argument("--work", default="/tmp/vocab_study", help="where the trained models go")
    parser.add_argument("--sizes", type=int, nargs="+", default=[16000, 24000, 32000])
    parser.add_argument("--markdown", help="also write the table and the command into this file")
    parser.add_argument(
        "--compare",
        metavar="SPM_FILE",
        help="also measure this SentencePiece model (e.g. the "
        "16k vocabulary bundled until issue #26: `git show 72ca01a:gtr_keras/assets/"
        "gtr-small-distilled/assets/tokenizer/vocabulary.spm > bundled-16k.spm`)",
    )
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    data = os.path.normpath(args.data)

    # Training texts.
    broad_files = sorted(
        os.path.join(args.broad, name) for name in os.listdir(args.broad) if name.endswith((".jsonl", ".jsonl.gz"))
    )
    debian_path = os.path.join(data, "debian-descriptions", "pairs.jsonl.gz")
    msmarco_path = corpus_file(os.path.join(data, "msmarco-dl19-subset"))
    pool = distinct(
        [t for path in broad_files for t in texts_of(path)] + list(texts_of(debian_path)) + list(texts_of(msmarco_path))
    )
    sample = sorted(random.Random(SEED).sample(range(len(pool)), min(SENTENCES, len(pool))))
    broad_texts = [pool[i] for i in sample]
    debian_lines = list(records(debian_path))
    chosen = sorted(random.Random(0).sample(range(len(debian_lines)), 30000))  # as recipes/distill_cpu/run.sh
    control_texts = distinct(
        [t for i in chosen for t in (debian_lines[i]["query"], debian_lines[i]["positive"])]
        + list(texts_of(msmarco_path))
    )[:SENTENCES]
    digest = hashlib.sha256("\n".join(broad_texts).encode("utf-8")).hexdigest()[:16]
    print(
        f"broad pool: {len(pool)} distinct texts from {len(broad_files)} broad files, Debian pairs, MS MARCO; "
        f"trained on a sample of {len(broad_texts)} (sha256 {digest}); control: {len(control_texts)} texts"
    )

    # Models.
    models = [(f"compare: {args.compare}", args.compare, None)] if args.compare else []
    jobs = [("control: Debian 30k + MS MARCO, 16k (this script)", "control-16000.model", control_texts, 16000)]
    jobs += [
        (f"broad + Debian + MS MARCO, {size // 1000}k", f"broad-{size}.model", broad_texts, size) for size in args.sizes
    ]
    for label, name, texts, size in jobs:
        path = os.path.join(args.work, name)
        seconds = None
        if not os.path.exists(path):
            seconds = train(texts, path, size)
        models.append((label, path, seconds))

    # Measured texts.
    measured = {}
    for collection in COLLECTIONS:
        measured[collection] = [
            joined(r) for _, r in zip(range(MEASURED), records(corpus_file(os.path.join(data, collection))))
        ]
    measured["debian"] = [r["positive"] for _, r in zip(range(MEASURED), records(debian_path))]

    header = ["tokenizer", "pieces", *measured]
    rows, whole_rows = [], []
    for label, path, seconds in models:
        processor = spm.SentencePieceProcessor(model_file=path)
        values = {name: pieces_per_word(processor, texts) for name, texts in measured.items()}
        rows.append([label, str(processor.get_piece_size()), *(f"{v[0]:.3f}" for v in values.values())])
        whole_rows.append([label, str(processor.get_piece_size()), *(f"{100 * v[1]:.1f}" for v in values.values())])
        if seconds is not None:
            print(f"trained {os.path.basename(path)} in {seconds:.0f} s")

    def table(rows):
        lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])

    per_word = table(rows)
    whole = table(whole_rows)
    print('\nPieces per whitespace word (first 2,000 documents, "title text"; lower is better):\n')
    print(per_word)
    print("\nWords that are a single piece, % (same texts):\n")
    print(whole)
    if args.markdown:
        command = " ".join(["nice -n 19 python recipes/distill_broad/vocab_study.py", *(argv or sys.argv[1:])])
        with open(args.markdown + ".partial", "w", encoding="utf-8") as f:
            f.write(
                f"<!-- tables written by vocab_study.py; command: {command} -->\n\n"
                f"Pieces per whitespace word:\n\n{per_word}\n\nWords that are a single piece, %:\n\n{whole}\n"
            )
        os.replace(args.markdown + ".partial", args.markdown)


if __name__ == "__main__":
    run_script(main)
