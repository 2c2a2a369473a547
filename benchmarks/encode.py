"""Encoding speed of gtr-keras against sentence-transformers (PyTorch, CPU), measured in one run.

A randomly initialised GTR-Base-shaped checkpoint (the T5-base encoder shape, a
32k SentencePiece model trained on the benchmark corpus) is written in
sentence-transformers layout and imported with `convert_sentence_transformers`,
so both libraries hold identical weights. Measured, with the libraries taking
turns within each repetition:

- sequences/s of the forward pass on identical token ids at (L=128, B=32) and
  (L=512, B=8), and the latency of one query at (L=64, B=1);
- the CPU's attainable float32 and bfloat16 FLOP rates (a large `tf.matmul`),
  the FLOP rate each forward pass achieves as a fraction of its precision's
  (matmul FLOPs counted), and from them the best ratio each target could reach
  on this CPU;
- end-to-end documents/s on a sample of a BEIR corpus (variable lengths)
  through each library's own `encode`: tokenisation, length sorting, padding,
  batch size 32, 512 tokens;
- bfloat16 (`--precision bfloat16`): speed against our own float32, the cosine
  of each bfloat16 embedding to its float32 one, and, given a trained model
  (`--trained-model`), NDCG@10 on the corpus's test queries in both precisions;
- where the time goes (`profile_rows`): at each throughput shape, the
  relative-position bias, the attention sublayers (RMS norm, q/k/v/o
  projections, scores, softmax, context) and the feed-forward sublayers of every
  layer, each library's own way (ours: each part a graph of its own;
  PyTorch: forward hooks on its T5 layers inside one forward pass), the rest
  of the pass (embedding, final norm, pooling, projection) as the remainder; and
  on the corpus sample, the tokenizer's time and the share of padded tokens
  in the length-sorted batches.

The kernels follow the CPU unless held down: `ONEDNN_MAX_CPU_ISA=AVX2`,
`MKL_ENABLE_INSTRUCTIONS=AVX2` and `ATEN_CPU_CAPABILITY=avx2` hold TensorFlow's
oneDNN, PyTorch's MKL and oneDNN, and PyTorch's own vectorised kernels to AVX2
(`ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 MKL_ENABLE_INSTRUCTIONS=AVX512`: AVX-512
with bfloat16, no AMX); `ONEDNN_VERBOSE=1` prints the ISA oneDNN took. The
block records them.

Results are printed and appended to the "## Encode" section of
`benchmarks/RESULTS.md`. Needs the `[reference]` extra (torch, transformers,
sentence-transformers); gtr-keras itself never imports torch.

Usage:
    PYTHONPATH=. python benchmarks/encode.py --docs 300
    ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 \
        PYTHONPATH=. python benchmarks/encode.py --docs 300
    PYTHONPATH=. python benchmarks/encode.py --smoke --no-record   # tiny model, seconds
"""

import argparse
import collections
import datetime
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from matmul import square_matmul  # noqa: E402
from results import RESULTS, machine, publish, rerun_command, time_interleaved  # noqa: E402

from gtr_keras import GTRTextEmbedder, load, save  # noqa: E402
from gtr_keras.beir import load_corpus
from gtr_keras.models.gtr.gtr_tokenizer import EOS_ID, train_sentencepiece  # noqa: E402
from gtr_keras.models.text_encoder import length_sorted_batches  # noqa: E402
from tests.reference_checkpoint import BASE_T5, TINY_T5, build_checkpoint  # noqa: E402

SECTION = "## Encode"
SHAPES = ((128, 32), (512, 8))  # (L, B) for throughput
LATENCY_SHAPE = (64, 1)
CONFIGS = {"base": (BASE_T5, 32000), "tiny": (TINY_T5, 1000)}  # T5 shape, SentencePiece pieces
TRAINED_MODEL = "runs/pretrain_finetune_cpu/finetune/model"
TORCH = "sentence-transformers fp32"
OURS, OURS_XLA, OURS_BF16, OURS_BF16_XLA = (
    "gtr-keras fp32",
    "gtr-keras fp32 XLA",
    "gtr-keras bf16",
    "gtr-keras bf16 XLA",
)
ISA_ENVIRONMENT = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")
PARTS = ("relative-position bias", "attention", "feed-forward", "rest of the pass")
BF16_POLICY = "bfloat16"  # as `--precision bfloat16`: bfloat16 weights and arithmetic, float32 output
PRECISIONS = ("float32", "bfloat16")


def prepare_checkpoints(config_name, corpus_texts, work_dir):
    """The sentence-transformers checkpoint and its gtr-keras conversion (cached in `work_dir`)."""
    t5_config, pieces = CONFIGS[config_name]
    root = os.path.join(work_dir, f"gtr-{config_name}-random")
    st_dir, model_dir = os.path.join(root, "sentence-transformers"), os.path.join(root, "gtr-keras")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        os.makedirs(root, exist_ok=True)
        spiece = train_sentencepiece(corpus_texts, os.path.join(root, "spiece.model"), pieces)
        build_checkpoint(st_dir, seed=0, spiece_path=spiece, t5_config=t5_config)
        save(GTRTextEmbedder.from_preset(st_dir), model_dir)
    return st_dir, model_dir


def forward_flops(model, batch, length):
    """FLOPs (2 per multiply-add) of the matmuls of one `GTRTextEmbedder` forward pass."""
    embedding_dim, model = model.embedding_dim, model.backbone
    inner = model.num_heads * model.key_value_dim
    feedforward_in = 2 if model.feedforward == "gated-gelu" else 1
    per_token = 2 * model.hidden_dim * (4 * inner + (feedforward_in + 1) * model.intermediate_dim)
    attention = 2 * 2 * batch * length * length * inner
    return model.num_layers * (batch * length * per_token + attention) + 2 * batch * model.hidden_dim * embedding_dim


def token_batch(batch, length, vocabulary, seed):
    """Identical inputs for both libraries: random piece ids ending in EOS, no padding."""
    ids = np.random.default_rng(seed).integers(3, vocabulary, (batch, length)).astype(np.int32)
    ids[:, -1] = EOS_ID
    return ids, np.ones_like(ids)


def torch_forward(st):
    import torch

    def forward(ids, mask):
        with torch.inference_mode():
            features = {"input_ids": torch.from_numpy(ids).long(), "attention_mask": torch.from_numpy(mask).long()}
            return st(features)["sentence_embedding"].numpy()

    return forward


def forward_rows(forwards, model, vocabulary, matmul_size, repeats, precisions=PRECISIONS):
    """Throughput rows at `SHAPES`, latency rows at `LATENCY_SHAPE`, and the attainable GFLOP/s per precision.

    The attainable rate is the best median of the square matmul, which takes
    its turn among the libraries at each throughput shape, so that it runs
    under the same conditions as they do.
    """
    matmuls = {f"matmul {dtype}": square_matmul(matmul_size, dtype) for dtype in precisions}
    rows, matmul_rates = [], {dtype: [] for dtype in precisions}
    for (length, batch), kind in [(shape, "throughput") for shape in SHAPES] + [(LATENCY_SHAPE, "latency")]:
        ids, mask = token_batch(batch, length, vocabulary, seed=length)
        outputs = {name: fn(ids, mask) for name, fn in forwards.items()}
        functions = {name: (lambda fn=fn: fn(ids, mask)) for name, fn in forwards.items()}
        if kind == "throughput":
            functions.update({name: fn for name, (fn, _) in matmuls.items()})
        seconds = time_interleaved(functions, repeats * (4 if kind == "latency" else 1))
        if kind == "throughput":
            for dtype in precisions:
                name = f"matmul {dtype}"
                matmul_rates[dtype].append(matmuls[name][1] / statistics.median(seconds.pop(name)) / 1e9)
                print(f"{matmul_size}^2 {dtype} tf.matmul: {matmul_rates[dtype][-1]:.1f} GFLOP/s", flush=True)
        flops = forward_flops(model, batch, length)
        reference = statistics.median(seconds[TORCH])
        for name, times in seconds.items():
            median = statistics.median(times)
            rows.append(
                {
                    "kind": kind,
                    "L": length,
                    "B": batch,
                    "library": name,
                    "seconds": median,
                    "seq_per_s": batch / median,
                    "gflops": flops / median / 1e9,
                    "vs_torch": reference / median,
                    "min_cosine_to_torch": float(np.min(np.sum(outputs[name] * outputs[TORCH], axis=1))),
                }
            )
    attainable = {dtype: max(rates) for dtype, rates in matmul_rates.items()}
    for row in rows:
        row["fraction"] = row["gflops"] / attainable[precision_of(row["library"])]
    return rows, attainable


def precision_of(library):
    return "bfloat16" if library in (OURS_BF16, OURS_BF16_XLA) else "float32"


def keras_parts(encoder, ids, mask):
    """`{part: function}` of our forward pass on `ids`: each part a `tf.function` of its own over every layer,
    on the hidden states the embedding gives (the parts' work does not depend on their values)."""
    backbone = encoder.model.backbone
    blocks = backbone.encoder_blocks
    hidden = backbone.token_embedding(ids)
    bias = backbone.relative_position_bias(mask)
    return {
        "relative-position bias": tf.function(lambda: backbone.relative_position_bias(mask)),
        "attention": tf.function(lambda: [block.attention(block.attention_norm(hidden), bias) for block in blocks]),
        "feed-forward": tf.function(
            lambda: [block.feedforward_block(block.feedforward_norm(hidden)) for block in blocks]
        ),
    }


def torch_parts(st, ids, mask, repeats):
    """`{part: median seconds}` of PyTorch's forward pass: forward hooks time each T5 layer's self-attention
    and feed-forward sublayers inside `repeats` whole passes (the first layer's includes computing the
    position bias, timed alone by `compute_bias` and taken out of it)."""
    import torch

    blocks = st[0].auto_model.encoder.block
    spent, began, handles = collections.defaultdict(float), {}, []
    for block in blocks:
        for name, layer in (("attention", block.layer[0]), ("feed-forward", block.layer[1])):
            handles.append(
                layer.register_forward_pre_hook(lambda *_, n=name: began.__setitem__(n, time.perf_counter()))
            )
            handles.append(
                layer.register_forward_hook(
                    lambda *_, n=name: spent.__setitem__(n, spent[n] + time.perf_counter() - began[n])
                )
            )
    forward = torch_forward(st)
    attention = blocks[0].layer[0].SelfAttention
    totals = collections.defaultdict(list)
    try:
        forward(ids, mask)
        for _ in range(repeats):
            spent.clear()
            start = time.perf_counter()
            forward(ids, mask)
            totals["forward pass"].append(time.perf_counter() - start)
            for name in ("attention", "feed-forward"):
                totals[name].append(spent[name])
            start = time.perf_counter()
            with torch.inference_mode():
                attention.compute_bias(ids.shape[1], ids.shape[1])
            totals["relative-position bias"].append(time.perf_counter() - start)
    finally:
        for handle in handles:
            handle.remove()
    medians = {name: statistics.median(times) for name, times in totals.items()}
    medians["attention"] -= medians["relative-position bias"]
    return medians


def profile_rows(st, encoders, vocabulary, texts, batch_size, repeats):
    """Where each library's time goes (see the module docstring): `(rows, text_parts)`, `rows` one per
    (shape, part) with each library's median seconds, `text_parts` the corpus sample's tokenizer seconds per
    library and padding share."""
    rows = []
    for length, batch in SHAPES:
        ids, mask = token_batch(batch, length, vocabulary, seed=length)
        found = {TORCH: torch_parts(st, ids, mask, repeats)}
        for name, encoder in encoders.items():
            functions = {"forward pass": lambda e=encoder: e.embed_tokens(ids, mask), **keras_parts(encoder, ids, mask)}
            seconds = time_interleaved(functions, repeats)
            found[name] = {part: statistics.median(times) for part, times in seconds.items()}
        for medians in found.values():
            medians["rest of the pass"] = medians["forward pass"] - sum(medians[part] for part in PARTS[:-1])
        rows += [
            {"L": length, "B": batch, "part": part, **{n: f[part] for n, f in found.items()}}
            for part in (*PARTS, "forward pass")
        ]
    encoder = next(iter(encoders.values()))
    tokenizers = {TORCH: lambda: st.tokenize(texts), "gtr-keras": lambda: encoder.tokenize(texts, "document")}
    tokenizer_seconds = {n: statistics.median(t) for n, t in time_interleaved(tokenizers, repeats).items()}
    lengths = [len(row) for row in encoder.tokenize(texts, "document")]
    padded = sum(len(rows_) * max(lengths[i] for i in rows_) for rows_ in length_sorted_batches(lengths, batch_size))
    return rows, {"tokenizer": tokenizer_seconds, "padding": 1 - sum(lengths) / padded, "tokens": sum(lengths)}


def table_profile(rows, text_parts, num_docs, libraries):
    lines = [
        "| L | B | part | "
        + " | ".join(f"{name} ms" for name in libraries)
        + " | "
        + " | ".join(f"{name} share" for name in libraries)
        + " |",
        "|---:|---:|---|" + "---:|" * (2 * len(libraries)),
    ]
    totals = {(r["L"], r["B"]): r for r in rows if r["part"] == "forward pass"}
    for r in rows:
        total = totals[r["L"], r["B"]]
        lines.append(
            f"| {r['L']} | {r['B']} | {r['part']} | "
            + " | ".join(f"{r[name] * 1e3:.1f}" for name in libraries)
            + " | "
            + " | ".join(f"{r[name] / total[name]:.0%}" for name in libraries)
            + " |"
        )
    tokenizer = text_parts["tokenizer"]
    lines += [
        "",
        f"- Tokenizer on the {num_docs} sampled documents ({text_parts['tokens']:,} tokens): "
        + ", ".join(f"{name} {seconds * 1e3:.0f} ms" for name, seconds in tokenizer.items())
        + f". Padding in length-sorted batches: {text_parts['padding']:.1%} of the tokens run.",
    ]
    return "\n".join(lines)


def corpus_rows(st, encoders, texts, batch_size, repeats):
    """Documents/s through each library's own `encode`: the median of `repeats` passes, the libraries taking
    turns, after a warm-up on 2 batches."""
    encodes = {TORCH: lambda t: st.encode(t, batch_size=batch_size, convert_to_numpy=True)}
    encodes.update({name: (lambda t, e=e: e.encode_documents(t, batch_size)) for name, e in encoders.items()})
    outputs = {}
    for encode in encodes.values():
        encode(texts[: 2 * batch_size])
    seconds = time_interleaved(
        {name: (lambda n=name, e=encode: outputs.__setitem__(n, e(texts))) for name, encode in encodes.items()},
        repeats,
        warmup=0,
    )
    rows = [{"library": name, "seconds": statistics.median(times)} for name, times in seconds.items()]
    for row in rows:
        print(f"{row['library']}: {len(texts)} documents in {row['seconds']:.1f} s (median)", flush=True)
    reference = rows[0]["seconds"]
    for row in rows:
        row["docs_per_s"] = len(texts) / row["seconds"]
        row["vs_torch"] = reference / row["seconds"]
        row["min_cosine_to_torch"] = float(np.min(np.sum(outputs[row["library"]] * outputs[TORCH], axis=1)))
    bf16_cosines = np.sum(outputs[OURS_BF16] * outputs[OURS], axis=1) if OURS_BF16 in outputs else None
    return rows, bf16_cosines


def trained_model_rows(model_dir, dataset, batch_size):
    """NDCG@10 on `dataset`'s test split with the trained model in float32 and bfloat16."""
    from gtr_keras import load_dataset
    from gtr_keras.beir import evaluate_run
    from gtr_keras.retrieval.runs import gtr_run
    from gtr_keras.storage.search_index import SearchIndex

    corpus, queries, qrels, _ = load_dataset(dataset, "test")
    rows, embeddings = [], {}
    for precision, policy in (("float32", None), ("bfloat16", BF16_POLICY)):
        encoder = load(model_dir, dtype=policy)
        start = time.perf_counter()
        embeddings[precision] = encoder.encode_documents(corpus.joined(), batch_size)
        seconds = time.perf_counter() - start
        index = SearchIndex(corpus.ids, embeddings[precision], "exact")
        ndcg = evaluate_run(qrels, gtr_run(encoder, corpus, queries, batch_size=batch_size, index=index))["ndcg@10"]
        rows.append({"precision": precision, "docs_per_s": len(corpus) / seconds, "ndcg": ndcg})
        print(f"trained model {precision}: NDCG@10 {ndcg:.4f}, {len(corpus) / seconds:.1f} docs/s", flush=True)
    cosines = np.sum(embeddings["float32"] * embeddings["bfloat16"], axis=1)
    return rows, cosines, len(corpus), len(qrels)


def table_forward(rows):
    lines = [
        "| L | B | library | median | seq/s | GFLOP/s | of attainable | speed vs PyTorch | min cos to PyTorch |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        median = f"{r['seconds'] * 1e3:.1f} ms" if r["kind"] == "latency" else f"{r['seconds']:.3f} s"
        lines.append(
            f"| {r['L']} | {r['B']} | {r['library']} | {median} | {r['seq_per_s']:.2f} | {r['gflops']:.1f} | "
            f"{r['fraction']:.0%} | {r['vs_torch']:.2f}x | {r['min_cosine_to_torch']:.6f} |"
        )
    return "\n".join(lines)


def table_corpus(rows, num_docs):
    lines = [
        "| library | documents | s | docs/s | speed vs sentence-transformers | min cos to PyTorch |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['library']} | {num_docs} | {r['seconds']:.1f} | {r['docs_per_s']:.2f} | {r['vs_torch']:.2f}x | "
            f"{r['min_cosine_to_torch']:.6f} |"
        )
    return "\n".join(lines)


def targets(forward, corpus, bf16_cosines, trained, attainable):
    """The issue's targets against this run's numbers: (target, measured, best this CPU allows, met).

    The bound of a speed target is what the measured attainable matmul rate
    would give if every matmul FLOP of the forward pass ran at it (and nothing
    else took time): no implementation on this CPU does better.
    """

    def row(library, kind, length):
        return next(r for r in forward if r["library"] == library and r["kind"] == kind and r["L"] == length)

    def latency_row(library):
        ours, torch = row(library, "latency", 64), row(TORCH, "latency", 64)
        ratio = ours["seconds"] / torch["seconds"]
        bound = torch["gflops"] / attainable[precision_of(library)]
        return (
            f"query latency (L=64, B=1) <= 0.5x PyTorch's, {library}",
            f"{ratio:.2f}x ({ours['seconds'] * 1e3:.1f} vs {torch['seconds'] * 1e3:.1f} ms)",
            f">= {bound:.2f}x",
            ratio <= 0.5,
        )

    ours_128, torch_128 = row(OURS, "throughput", 128), row(TORCH, "throughput", 128)
    best_fraction = max(r["fraction"] for r in forward if r["library"] == OURS and r["kind"] == "throughput")
    ours_corpus = next(r for r in corpus if r["library"] == OURS)
    result = [
        (
            "fp32 encode (L=128, B=32) >= 1.5x PyTorch",
            f"{ours_128['vs_torch']:.2f}x",
            f"<= {attainable['float32'] / torch_128['gflops']:.2f}x",
            ours_128["vs_torch"] >= 1.5,
        ),
        latency_row(OURS),
        (
            "achieved FLOP rate >= 80% of attainable (best throughput shape)",
            f"{best_fraction:.0%}",
            "100%",
            best_fraction >= 0.8,
        ),
        (
            "corpus docs/s >= 1.5x sentence-transformers",
            f"{ours_corpus['vs_torch']:.2f}x",
            "",
            ours_corpus["vs_torch"] >= 1.5,
        ),
    ]
    if any(r["library"] == OURS_BF16 for r in forward):
        result.append(latency_row(OURS_BF16))
        speedup = ours_128["seconds"] / row(OURS_BF16, "throughput", 128)["seconds"]
        bound = attainable["bfloat16"] / ours_128["gflops"]
        result.append(
            ("bf16 throughput (L=128, B=32) >= 1.8x our fp32", f"{speedup:.2f}x", f"<= {bound:.2f}x", speedup >= 1.8)
        )
        bf16_fraction, bf16_best = max(
            (r["fraction"], r["library"])
            for r in forward
            if precision_of(r["library"]) == "bfloat16" and r["kind"] == "throughput"
        )
        result.append(
            (
                "bf16 FLOP rate >= 50% of the bf16 matmul rate (best throughput shape)",
                f"{bf16_fraction:.0%} ({bf16_best})",
                "100%",
                bf16_fraction >= 0.5,
            )
        )
        cosines = [bf16_cosines] + ([trained["cosines"]] if trained else [])
        low = min(float(np.min(c)) for c in cosines)
        result.append(("bf16 per-vector cosine to fp32 >= 0.999", f"min {low:.5f}", "", low >= 0.999))
    if trained:
        delta = abs(trained["rows"][1]["ndcg"] - trained["rows"][0]["ndcg"])
        result.append(
            ("bf16 NDCG@10 within 0.002 of fp32 (trained model)", f"difference {delta:.4f}", "", delta <= 0.002)
        )
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="/work/shared/data/scifact", help="BEIR directory")
    parser.add_argument("--docs", type=int, default=300, help="documents sampled (seed 0) for the corpus test")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per library and shape (x4 for latency)")
    parser.add_argument("--matmul-size", type=int, default=4096, help="side of the attainable-FLOP-rate matmul")
    parser.add_argument("--batch-size", type=int, default=32, help="encode batch size on the corpus")
    parser.add_argument(
        "--corpus-repeats", type=int, default=3, help="timed passes over the corpus sample per library (median)"
    )
    parser.add_argument("--xla", action="store_true", help="also time our forward pass compiled with XLA")
    parser.add_argument(
        "--float32-only", action="store_true", help="leave bfloat16 out (a CPU without bfloat16 instructions)"
    )
    parser.add_argument(
        "--trained-model",
        default=TRAINED_MODEL,
        help="gtr-keras model directory for the NDCG@10 comparison (skipped if missing)",
    )
    parser.add_argument(
        "--work-dir",
        default=os.path.expanduser("~/.cache/gtr-keras-benchmarks"),
        help="where the random checkpoints are cached",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny model and sizes: checks the script in seconds")
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.smoke:
        args.docs, args.repeats, args.corpus_repeats = min(args.docs, 40), 1, 1
        args.matmul_size, args.trained_model = 512, None

    import torch
    from sentence_transformers import SentenceTransformer

    started = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()
    corpus = load_corpus(args.dataset)
    texts = corpus.joined()
    sample = [texts[i] for i in np.random.default_rng(0).choice(len(texts), args.docs, replace=False)]
    config_name = "tiny" if args.smoke else "base"
    st_dir, model_dir = prepare_checkpoints(config_name, texts, args.work_dir)
    st = SentenceTransformer(st_dir, device="cpu")
    encoder = load(model_dir)
    encoders = {OURS: encoder}
    forwards = {TORCH: torch_forward(st), OURS: encoder.embed_tokens}
    if not args.float32_only:
        encoders[OURS_BF16] = load(model_dir, dtype=BF16_POLICY)
        forwards[OURS_BF16] = encoders[OURS_BF16].embed_tokens
    if args.xla:
        forwards[OURS_XLA] = load(model_dir, jit_compile=True).embed_tokens
        if not args.float32_only:
            forwards[OURS_BF16_XLA] = load(model_dir, dtype=BF16_POLICY, jit_compile=True).embed_tokens

    vocabulary = encoder.tokenizer.vocabulary_size()
    precisions = ("float32",) if args.float32_only else PRECISIONS
    forward, attainable = forward_rows(forwards, encoder.model, vocabulary, args.matmul_size, args.repeats, precisions)
    print(table_forward(forward), flush=True)
    profile, text_parts = profile_rows(st, encoders, vocabulary, sample, args.batch_size, args.repeats)
    print(table_profile(profile, text_parts, args.docs, [TORCH, *encoders]), flush=True)
    corpus_result, bf16_cosines = corpus_rows(st, encoders, sample, args.batch_size, args.corpus_repeats)
    trained = None
    if args.trained_model and os.path.exists(os.path.join(args.trained_model, "config.json")):
        rows, cosines, num_docs, num_queries = trained_model_rows(args.trained_model, args.dataset, args.batch_size)
        trained = {"rows": rows, "cosines": cosines, "docs": num_docs, "queries": num_queries}
    load_after = os.getloadavg()

    caps = [f"{name}={os.environ[name]}" for name in ISA_ENVIRONMENT if name in os.environ]
    command = " ".join([*caps, rerun_command(__file__, argv)])
    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    flags = sorted(
        {
            f
            for f in open("/proc/cpuinfo").read().split()
            if f in ("avx512_bf16", "amx_bf16", "amx_tile", "avx512_vnni", "avx512f")
        }
    )
    m = encoder.model.backbone
    shape = (
        f"{m.num_layers} layers, d_model {m.hidden_dim}, {m.num_heads} heads x {m.key_value_dim}, "
        f"d_ff {m.intermediate_dim}, vocabulary {m.vocabulary_size}, {encoder.model.count_params():,} parameters"
    )
    block = [
        f"### {started:%Y-%m-%d %H:%M} UTC: {'smoke test (tiny model)' if args.smoke else 'GTR-Base shape'}",
        "",
        f"Command: `{command}`",
        "",
        f"- Machine: {machine()}, {ram_gib:.0f} GiB RAM, CPU flags {', '.join(flags)}; 1-min load average "
        f"{load_before[0]:.2f} before and {load_after[0]:.2f} after. TensorFlow {tf.__version__} (oneDNN "
        f"{'on' if os.environ.get('TF_ENABLE_ONEDNN_OPTS', '1') != '0' else 'off'}, "
        f"{tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()} intra-op threads), "
        f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads), sentence-transformers "
        f"{__import__('sentence_transformers').__version__}. Kernels: "
        + (", ".join(f"`{cap}`" for cap in caps) or "the CPU's own")
        + ".",
        f"- Model: random weights (seed 0), {shape}; identical in both libraries (converted by "
        "`GTRTextEmbedder.from_preset`).",
        "- Attainable rates: "
        + ", ".join(f"{dtype} {rate:.1f} GFLOP/s" for dtype, rate in attainable.items())
        + f", each the best median of a {args.matmul_size}x{args.matmul_size} `tf.matmul` timed in turn with "
        "the libraries at each throughput shape. GFLOP/s counts the forward pass's matmul FLOPs; \"of "
        "attainable\" is against the row's own precision.",
        f"- Forward pass: identical random token ids without padding, medians of {args.repeats} calls "
        f"({4 * args.repeats} for latency) per library, the libraries taking turns; PyTorch runs "
        "`SentenceTransformer.forward` under `torch.inference_mode()`, ours `Encoder.embed_tokens` (a `tf.function`).",
        "",
        table_forward(forward),
        "",
        f"- Corpus: {args.docs} documents sampled (seed 0) from {os.path.basename(os.path.normpath(args.dataset))} "
        f"(title + text, variable lengths, 512-token limit), medians of {args.corpus_repeats} passes, the "
        f"libraries taking turns, after a warm-up on {2 * args.batch_size} of them; `SentenceTransformer.encode` "
        f"vs `Encoder.encode_documents`, batch size {args.batch_size}.",
        "",
        table_corpus(corpus_result, args.docs),
        "",
        f"- Where the time goes (`profile_rows`; medians of {args.repeats} calls; share of the library's own "
        "forward pass):",
        "",
        table_profile(profile, text_parts, args.docs, [TORCH, *encoders]),
        "",
    ]
    if trained:
        cos = trained["cosines"]
        block += [
            f"- bf16 vs fp32 with the trained model `{args.trained_model}` on "
            f"{os.path.basename(os.path.normpath(args.dataset))} test ({trained['docs']} documents, "
            f"{trained['queries']} queries, exact search): per-document cosine min {cos.min():.5f}, "
            f"mean {cos.mean():.6f}.",
            "",
            "| precision | NDCG@10 | docs/s (trained model) |",
            "|---|---:|---:|",
            *[f"| {r['precision']} | {r['ndcg']:.4f} | {r['docs_per_s']:.1f} |" for r in trained["rows"]],
            "",
        ]
    else:
        block += ["- NDCG@10 in bf16 vs fp32: not measured (no trained model given or found).", ""]
    if bf16_cosines is not None:
        block += [
            f"- bf16 vs fp32 (the random model, corpus sample): per-document cosine min "
            f"{bf16_cosines.min():.5f}, mean {bf16_cosines.mean():.6f}.",
            "",
        ]
    block += [
        'Targets ("best this CPU allows": every matmul FLOP at the attainable rate, nothing else timed):',
        "",
        "| target | measured | best this CPU allows | met |",
        "|---|---|---|---|",
    ]
    block += [
        f"| {t} | {m} | {bound} | {'yes' if ok else 'NO'} |"
        for t, m, bound, ok in targets(forward, corpus_result, bf16_cosines, trained, attainable)
    ]
    text = "\n".join(block)
    publish(text, args.results, SECTION, record_it=not args.no_record)


if __name__ == "__main__":
    main()
