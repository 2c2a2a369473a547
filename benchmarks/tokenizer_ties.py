"""How often GTRTokenizer (TF Text's SentencePiece op, in the graph) and the `sentencepiece` library (and
Hugging Face's T5 tokenizers, where `transformers` is installed) segment a text differently, whether each
difference is a tie (segmentations of equal unigram score), and how far the bundled model's embeddings move.

Run from the repository root:

    python benchmarks/tokenizer_ties.py --data ../shared/data            # the bundled and the fixture vocabularies
    python benchmarks/tokenizer_ties.py --data ../shared/data --train-32k # also a T5-like 32k unigram vocabulary

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

import gtr_keras
from gtr_keras.models.gtr.tokenizer import GTRTokenizer, train_sentencepiece
from gtr_keras.retrieval.readers import load_corpus, load_queries

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import machine, publish, rerun_command  # noqa: E402

SECTION = "## Tokenizer ties: TF Text vs sentencepiece"

COLLECTIONS = ("cranfield", "cisi", "scifact", "nfcorpus", "msmarco-dl19-subset")


def collection_texts(data):
    texts = []
    for name in COLLECTIONS:
        corpus = load_corpus(os.path.join(data, name))
        texts += corpus.joined() + list(load_queries(os.path.join(data, name)).values())
    return texts


def graph_ids(tokenizer, texts, batch=256):
    ids = []
    for start in range(0, len(texts), batch):
        ids += tokenizer.tokenize(texts[start : start + batch]).to_list()
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
        return {
            f"HF {type(tokenizer).__name__}": [
                tokenizer(t.strip(), add_special_tokens=False)["input_ids"] for t in texts
            ]
        }


def compare(name, proto, texts, encoder=None):
    processor = spm.SentencePieceProcessor(model_proto=proto)
    started = time.time()
    graph = graph_ids(GTRTokenizer(proto), texts)
    library = [processor.encode(t.strip()) for t in texts]
    differ = [i for i, (a, b) in enumerate(zip(graph, library)) if a != b]
    ties = sum(
        abs(sum(processor.get_score(p) for p in graph[i]) - sum(processor.get_score(p) for p in library[i])) < 1e-4
        for i in differ
    )
    row = {
        "vocabulary": name,
        "pieces": processor.get_piece_size(),
        "texts": len(texts),
        "TF Text != sentencepiece": len(differ),
        "of them ties": ties,
    }
    for other, ids in hugging_face_ids(proto, texts).items():
        row[f"sentencepiece != {other}"] = sum(a != b for a, b in zip(library, ids))
        row[f"TF Text != {other}"] = sum(a != b for a, b in zip(graph, ids))
    if encoder is not None and differ:
        moved = []
        for i in differ:
            a = encoder.embed_tokens(*padded([graph[i] + [1], library[i] + [1]]))
            moved.append(float(np.abs(a[0] - a[1]).max()))
        row["max embedding change"] = f"{max(moved):.2e}"
        row["example"] = repr(texts[differ[0]][:60])
    row["seconds"] = round(time.time() - started, 1)
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
    parser.add_argument("--train-32k", action="store_true", help="also train a 32k unigram vocabulary on the texts")
    args = parser.parse_args()
    texts = collection_texts(args.data)
    bundled = gtr_keras.load("gtr-small-distilled")
    rows = [compare("bundled (gtr-small-distilled, case-folded)", bundled.tokenizer.proto, texts, bundled)]
    with open(os.path.join("tests", "fixtures", "tiny-gtr-st", "spiece.model"), "rb") as f:
        rows.append(compare("tests/fixtures/tiny-gtr-st", f.read(), texts))
    if args.train_32k:
        with tempfile.TemporaryDirectory() as directory:
            path = train_sentencepiece(texts, os.path.join(directory, "t5-like.model"), vocabulary_size=32000)
            with open(path, "rb") as f:
                rows.append(compare("32k unigram trained on these texts", f.read(), texts))
    columns = list(dict.fromkeys(key for row in rows for key in row))
    block = "\n".join(
        [
            f"{time.strftime('%Y-%m-%d')}, {machine()}: `{rerun_command(__file__)}`",
            "",
            "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns),
            *("| " + " | ".join(str(row.get(column, "")) for column in columns) + " |" for row in rows),
        ]
    )
    publish(block, os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"), SECTION)


if __name__ == "__main__":
    main()
