"""Rerank latency per query at depths 20, 100 and 1000: gtr-keras' reranker beside sentence-transformers' CrossEncoder.

One randomly initialised cross-encoder of `cross-encoder/ms-marco-MiniLM-L6-v2`'s shape (BERT, 6 layers, hidden
384, 12 heads, intermediate 1536, vocabulary 30,522, one label, 512 tokens; no pre-trained weights can be
fetched here, and random weights cost what trained ones do) is built once with `transformers` by `--peer-python`
(an environment with torch, transformers and sentence-transformers, e.g. `/work/venv-ref`), its WordPiece
vocabulary the BERT special tokens, characters and the most frequent words of the documents, padded with
`[unusedN]` to 30,522. gtr-keras converts it (`gtr-keras convert`) and exports it to ONNX (`export --reranker
--format onnx`), so every runtime holds the same weights. A query is reranked at each depth N: N (query,
document) pairs of the collection's documents (SciFact's abstracts by default, cut at the 512-token budget), in
one run whose rounds alternate the runtimes (the median of the rounds is reported):

- gtr-keras: TensorFlow float32 and bfloat16 (`gtr_keras.load(MODEL_DIR)` and `dtype="bfloat16"`), ONNX
  Runtime float32 (`gtr_keras.load(ONNX_DIR)`: `tokenizers` on the host);
- sentence-transformers' `CrossEncoder(DIR).predict` (PyTorch), in a process of `--peer-python` that takes its
  turn in each round.

Each row also gives the largest difference of its scores from TensorFlow float32's, and the run the `lscpu` flags.

Usage (from the repository root, on an idle machine):

    PYTHONPATH=. python benchmarks/rerank.py --data ../shared/data --peer-python /work/venv-ref/bin/python
    PYTHONPATH=. python benchmarks/rerank.py --data ../shared/data --peer-python /work/venv-ref/bin/python \\
        --depths 5 --rounds 1 --no-record   # a check that it runs
"""

import argparse
import collections
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import RESULTS, lscpu_flags, machine, publish, rerun_command  # noqa: E402

SECTION = "## Rerank latency"
MINILM = dict(
    vocab_size=30522,
    hidden_size=384,
    num_hidden_layers=6,
    num_attention_heads=12,
    intermediate_size=1536,
    max_position_embeddings=512,
    num_labels=1,
)
MARK = "RESULT "  # the peer's lines of results (its libraries print lines of their own)
TF_FLOAT32 = "gtr-keras TensorFlow fp32"
PEER = "sentence-transformers CrossEncoder (PyTorch)"


def vocabulary(texts, size):
    words = collections.Counter(w for t in texts for w in re.findall(r"[a-z]+|[0-9]", t.lower()))
    characters = sorted(set("".join(texts).lower()) - set(" \t\n\r"))
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters, *(f"##{c}" for c in characters)]
    pieces += [word for word, _ in words.most_common(size) if word not in set(pieces)]
    pieces = list(dict.fromkeys(pieces))[:size]
    return pieces + [f"[unused{i}]" for i in range(size - len(pieces))]


def build_checkpoint(directory, texts_file):
    """The peer's `--build`: the random MiniLM-shaped cross-encoder, saved with `transformers` (once)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocabulary(texts, MINILM["vocab_size"])) + "\n")
    tokenizer = BertTokenizerFast(os.path.join(directory, "vocab.txt"), do_lower_case=True)
    tokenizer.model_max_length = 512
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(**MINILM)).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def run_peer(checkpoint, pairs_file, out_dir, batch_size):
    """The sentence-transformers side (`--peer`): for each `round DEPTH` line on stdin, reranks the first DEPTH
    pairs once and prints the seconds; the scores of each depth go to `out_dir`."""
    import sentence_transformers
    import torch
    from sentence_transformers import CrossEncoder

    with open(pairs_file, encoding="utf-8") as f:
        pairs = [tuple(pair) for pair in json.load(f)]
    model = CrossEncoder(checkpoint, device="cpu")
    versions = f"torch {torch.__version__}, sentence-transformers {sentence_transformers.__version__}"
    print(MARK + json.dumps({"versions": versions, "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        command, _, depth = line.strip().partition(" ")
        if command != "round":
            break
        start = time.perf_counter()
        scores = model.predict(pairs[: int(depth)], batch_size=batch_size, convert_to_numpy=True)
        seconds = time.perf_counter() - start
        np.save(os.path.join(out_dir, f"peer-{depth}.npy"), scores)
        print(MARK + json.dumps({"seconds": seconds}), flush=True)


def read_result(peer):
    for line in peer.stdout:
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise RuntimeError(f"the peer ended without a result (exit status {peer.wait()})")


def documents(data, collection, count):
    from gtr_keras.beir import load_corpus, load_queries

    corpus = load_corpus(os.path.join(data, collection))
    query = next(iter(load_queries(os.path.join(data, collection)).values()))
    texts = corpus.joined()
    return query, [texts[i % len(texts)] for i in range(count)]


def prepare(args, work):
    """The pairs, and the converted model directory and ONNX export of the peer's checkpoint (built once)."""
    import gtr_keras

    query, texts = documents(args.data, args.collection, max(args.depths))
    pairs_file = os.path.join(work, "pairs.json")
    with open(pairs_file, "w", encoding="utf-8") as f:
        json.dump([(query, text) for text in texts], f)
    checkpoint = os.path.join(work, "checkpoint")
    if not os.path.exists(os.path.join(checkpoint, "model.safetensors")):
        texts_file = os.path.join(work, "texts.json")
        with open(texts_file, "w", encoding="utf-8") as f:
            json.dump(texts, f)
        subprocess.run([args.peer_python, os.path.abspath(__file__), "--build", checkpoint, texts_file], check=True)
    paths = {"model": os.path.join(work, "model"), "onnx": os.path.join(work, "onnx")}
    if not os.path.exists(os.path.join(paths["model"], "config.json")):
        subprocess.run([sys.executable, "-m", "gtr_keras", "convert", checkpoint, paths["model"]], check=True)
    if not os.path.exists(os.path.join(paths["onnx"], "reranker.onnx")):
        gtr_keras.export(paths["model"], paths["onnx"], "onnx")
    return pairs_file, checkpoint, paths, [(query, text) for text in texts]


def measure(args, work):
    """`({(runtime, depth): [seconds per round]}, {(runtime, depth): scores}, peer's record)`."""
    import gtr_keras

    pairs_file, checkpoint, paths, pairs = prepare(args, work)
    peer = subprocess.Popen(
        [args.peer_python, os.path.abspath(__file__), "--peer", checkpoint, pairs_file, work]
        + ["--batch-size", str(args.batch_size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    runtimes = {
        TF_FLOAT32: gtr_keras.load(paths["model"]),
        "gtr-keras TensorFlow bf16": gtr_keras.load(paths["model"], dtype="bfloat16"),
        "gtr-keras ONNX Runtime fp32": gtr_keras.load(paths["onnx"]),
    }
    ready = read_result(peer)
    seconds, scores = collections.defaultdict(list), {}
    for depth in args.depths:
        for name, scorer in runtimes.items():
            scores[name, depth] = scorer.predict(pairs[:depth], batch_size=args.batch_size)  # warm-up
    for number in range(args.rounds):
        print(f"round {number + 1} of {args.rounds}", file=sys.stderr, flush=True)
        for depth in args.depths:
            for name, scorer in runtimes.items():
                start = time.perf_counter()
                scorer.predict(pairs[:depth], batch_size=args.batch_size)
                seconds[name, depth].append(time.perf_counter() - start)
            peer.stdin.write(f"round {depth}\n")
            peer.stdin.flush()
            seconds[PEER, depth].append(read_result(peer)["seconds"])
            scores[PEER, depth] = np.load(os.path.join(work, f"peer-{depth}.npy")).reshape(-1)
    peer.stdin.close()
    peer.wait(timeout=120)
    return seconds, scores, ready


def report(args, seconds, scores, peer, started):
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    names = [TF_FLOAT32, "gtr-keras TensorFlow bf16", "gtr-keras ONNX Runtime fp32", PEER]
    header = (
        "| runtime | "
        + " | ".join(f"depth {d}: ms per query" for d in args.depths)
        + " | max abs score diff to TF fp32 |"
    )
    lines = [header, "|---|" + "---:|" * (len(args.depths) + 1)]
    for name in names:
        cells = [f"{1000 * statistics.median(seconds[name, d]):.1f}" for d in args.depths]
        diff = max(float(np.abs(scores[name, d] - scores[TF_FLOAT32, d]).max()) for d in args.depths)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {diff:.2e} |")
    return "\n".join(
        [
            f"### {datetime.date.today()}, commit {commit}",
            "",
            f"- Command: `{rerun_command(__file__)}`",
            f"- Machine: {machine()}; lscpu flags: {lscpu_flags()}.",
            f"- Model: a random cross-encoder of ms-marco-MiniLM-L6-v2's shape (BERT, 6 layers, hidden 384, 12 "
            f"heads, 30,522 tokens, budget 512), the same weights in every runtime; one query of {args.collection} "
            f"and its first N documents, batch size {args.batch_size}; the median of {args.rounds} alternating "
            f"rounds; sentence-transformers' side: {peer['versions']}, {peer['threads']} threads.",
            f"- Wall time of the run: {time.time() - started:.0f} s.",
            "",
            *lines,
        ]
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join("..", "shared", "data"), help="BEIR collections")
    parser.add_argument("--collection", default="scifact", help="the collection whose documents are reranked")
    parser.add_argument("--depths", type=lambda s: [int(d) for d in s.split(",")], default=[20, 100, 1000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--peer-python", default=sys.executable, help="a Python with torch and sentence-transformers")
    parser.add_argument(
        "--work", default=os.path.join(tempfile.gettempdir(), "gtr-keras-rerank-benchmark"), help="models, kept"
    )
    parser.add_argument("--no-record", action="store_true", help="print only; RESULTS.md is left as it is")
    parser.add_argument("--peer", nargs=3, metavar=("CHECKPOINT", "PAIRS_JSON", "OUT_DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--build", nargs=2, metavar=("CHECKPOINT", "TEXTS_JSON"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        return build_checkpoint(*args.build)
    if args.peer:
        return run_peer(*args.peer, args.batch_size)
    started = time.time()
    os.makedirs(args.work, exist_ok=True)
    seconds, scores, peer = measure(args, args.work)
    publish(report(args, seconds, scores, peer, started), RESULTS, SECTION, not args.no_record)


if __name__ == "__main__":
    main()
