"""GTRTokenizer (TF Text's FastSentencepieceTokenizer, in the graph) against the `sentencepiece` library and
TF Text's older SentencepieceOp (GTRTokenizer's op before issue #38), on every text of the five collections:
how many texts each op segments otherwise than the library, whether those are ties (segmentations of equal
unigram score), how many corpus documents change ids from the old op to the new one, how far the bundled
model's embeddings move there, and both ops' speed.

Run from the repository root (it trains a 32k unigram vocabulary on the texts as the third vocabulary):

    PYTHONPATH=. python benchmarks/tokenizer_ties.py --data ../shared/data

It prints a table (one row per vocabulary) and appends it to benchmarks/RESULTS.md with the command line.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import sentencepiece as spm
import tensorflow_text

import gtr_keras
from gtr_keras import GTRTokenizer
from gtr_keras.beir import load_corpus, load_queries
from gtr_keras.models.gtr.gtr_tokenizer import train_sentencepiece

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import machine, publish, rerun_command, time_interleaved  # noqa: E402

SECTION = "## Tokenizer ties: TF Text vs sentencepiece"

COLLECTIONS = ("cranfield", "cisi", "scifact", "nfcorpus", "msmarco-dl19-subset")
BATCH = 256
SPEED_TEXTS = 2000  # the first texts of the collections (Cranfield's documents), timed in turns
SPEED_REPEATS = 7


def collection_texts(data):
    """Every document (title and text joined) and query of the collections, and how many are documents."""
    documents, queries = [], []
    for name in COLLECTIONS:
        documents += load_corpus(os.path.join(data, name)).joined()
        queries += list(load_queries(os.path.join(data, name)).values())
    return documents + queries, len(documents)


def op_ids(tokenize, texts):
    """Ids of `texts`, tokenized in batches of BATCH."""
    ids = []
    for start in range(0, len(texts), BATCH):
        ids += tokenize(texts[start : start + BATCH]).to_list()
    return ids


def hugging_face_ids(proto, texts):
    """Ids (no EOS) of the tokenizer Hugging Face loads for the sentence-transformers layout that
    `gtr-keras convert --to sentence-transformers` writes, or {} without `transformers`."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return {}
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "spiece.model"), "wb") as f:
            f.write(proto)
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
            json.dump(
                {
                    "tokenizer_class": "T5Tokenizer",
                    "extra_ids": 0,
                    "legacy": True,
                    "eos_token": "</s>",
                    "pad_token": "<pad>",
                    "unk_token": "<unk>",
                },
                f,
            )
        tokenizer = AutoTokenizer.from_pretrained(directory)
        return {f"HF {type(tokenizer).__name__}": [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]}


def compare(name, proto, texts, num_documents, encoder=None):
    texts = [t.strip() for t in texts]
    processor = spm.SentencePieceProcessor(model_proto=proto)
    library = [processor.encode(t) for t in texts]
    new = op_ids(GTRTokenizer(proto).tokenize, texts)
    # The speed of the two ops alone, on the same stripped texts (GTRTokenizer adds the same string ops to either).
    new_op = tensorflow_text.FastSentencepieceTokenizer(proto).tokenize
    old_op = tensorflow_text.SentencepieceTokenizer(proto).tokenize
    old = op_ids(old_op, texts)
    sample = texts[:SPEED_TEXTS]
    seconds = time_interleaved(
        {"old": lambda: op_ids(old_op, sample), "new": lambda: op_ids(new_op, sample)}, SPEED_REPEATS
    )
    old_seconds, new_seconds = (float(np.median(seconds[name])) for name in ("old", "new"))
    old_differ = [i for i, (a, b) in enumerate(zip(old, library)) if a != b]
    ties = sum(
        abs(sum(processor.get_score(p) for p in old[i]) - sum(processor.get_score(p) for p in library[i])) < 1e-4
        for i in old_differ
    )
    row = {
        "vocabulary": name,
        "pieces": processor.get_piece_size(),
        "texts": len(texts),
        "new op != sentencepiece": sum(a != b for a, b in zip(new, library)),
        "old op != sentencepiece": len(old_differ),
        "of them ties": ties,
        "documents whose ids change (old -> new op)": f"{sum(old[i] != new[i] for i in range(num_documents))} "
        f"of {num_documents}",
        f"old op s / {SPEED_TEXTS} texts (median of {SPEED_REPEATS})": round(old_seconds, 3),
        f"new op s / {SPEED_TEXTS} texts": round(new_seconds, 3),
        "speed-up": f"{old_seconds / new_seconds:.1f}x",
    }
    for other, ids in hugging_face_ids(proto, texts).items():
        row[f"sentencepiece != {other}"] = sum(a != b for a, b in zip(library, ids))
    if encoder is not None and old_differ:
        moved = []
        for i in old_differ:
            a = encoder.embed_tokens(*padded([old[i] + [1], new[i] + [1]]))
            moved.append(float(np.abs(a[0] - a[1]).max()))
        row["max embedding change (old -> new op)"] = f"{max(moved):.2e}"
    return row


def padded(rows):
    length = max(len(r) for r in rows)
    ids = np.zeros((len(rows), length), np.int32)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    return ids, (ids != 0).astype(np.int32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="folder of BEIR collections (../shared/data)")
    args = parser.parse_args()
    texts, num_documents = collection_texts(args.data)
    bundled = gtr_keras.load("gtr_small_distilled_en")
    rows = [
        compare("bundled (gtr_small_distilled_en, case-folded)", bundled.tokenizer.proto, texts, num_documents, bundled)
    ]
    with open(os.path.join("tests", "fixtures", "tiny-gtr-st", "spiece.model"), "rb") as f:
        rows.append(compare("tests/fixtures/tiny-gtr-st", f.read(), texts, num_documents))
    with tempfile.TemporaryDirectory() as directory:
        path = train_sentencepiece(texts, os.path.join(directory, "t5-like.model"), vocabulary_size=32000)
        with open(path, "rb") as f:
            rows.append(compare("32k unigram trained on these texts", f.read(), texts, num_documents))
    columns = list(dict.fromkeys(key for row in rows for key in row))
    block = "\n".join(
        [
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine()}: `{rerun_command(__file__)}`",
            "",
            "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns),
            *("| " + " | ".join(str(row.get(column, "")) for column in columns) + " |" for row in rows),
        ]
    )
    publish(block, os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"), SECTION)


if __name__ == "__main__":
    main()
