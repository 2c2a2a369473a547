"""Training speed of gtr-keras against sentence-transformers (PyTorch, CPU), measured in one run.

For each model shape, a random checkpoint is written in sentence-transformers
layout and imported with `convert_sentence_transformers`, so both libraries
start from identical weights. Both then train on the same batch of identical
token ids, B (query, positive, 1 hard negative) triples:

- gtr-keras: `DualEncoder` (bidirectional in-batch softmax, temperature 0.01)
  compiled as `gtr-keras train` compiles it, with Keras' Adafactor, run by
  `fit`;
- sentence-transformers: `MultipleNegativesSymmetricRankingLoss` (scale 100 =
  1 / temperature) with `torch.optim.Adafactor`, a plain
  zero_grad / forward / backward / step loop.

Dropout is off in both. Each library runs `--warmup` untimed steps, then the
libraries take turns running `--steps` timed steps; pairs/s is B over the
median step time. Results are printed and appended to the "## Train" section
of `benchmarks/RESULTS.md`.

Usage:
    PYTHONPATH=. python benchmarks/train.py
    PYTHONPATH=. python benchmarks/train.py --configs tiny --steps 2 --no-record   # seconds
"""

import argparse
import datetime
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from results import RESULTS, machine, publish, rerun_command, time_interleaved  # noqa: E402

from gtr_keras import DualEncoder, GTRTextEmbedder  # noqa: E402
from gtr_keras.models.gtr.gtr_tokenizer import EOS_ID  # noqa: E402
from gtr_keras.training import make_optimizer  # noqa: E402
from tests.reference_checkpoint import BASE_T5, ST_DIR, TINY_T5, build_checkpoint  # noqa: E402

SECTION = "## Train"
TEMPERATURE = 0.01
CONFIGS = {  # T5 shapes; "small" is the gtr-small preset, "base-4l" GTR-Base's width with 4 of its 12 layers
    "tiny": TINY_T5,
    "small": dict(vocab_size=8100, d_model=256, d_kv=64, num_heads=4, d_ff=768, num_layers=4),
    "base-4l": {**BASE_T5, "num_layers": 4},
}


def random_checkpoint(config_name, work_dir):
    """A random sentence-transformers checkpoint of the shape `config_name` (cached in `work_dir`)."""
    st_dir = os.path.join(work_dir, f"train-{config_name}-random")
    if not os.path.exists(os.path.join(st_dir, "modules.json")):
        build_checkpoint(
            st_dir,
            seed=0,
            spiece_path=os.path.join(ST_DIR, "spiece.model"),
            t5_config={**CONFIGS[config_name], "feed_forward_proj": "relu"},
        )
    return st_dir


def triples(batch, query_length, document_length, vocabulary, seed=0):
    """B (query, positive, negative) token-id rows ending in EOS, no padding."""
    rng = np.random.default_rng(seed)

    def ids(rows, length):
        out = rng.integers(3, vocabulary, (rows, length)).astype(np.int32)
        out[:, -1] = EOS_ID
        return out

    return ids(batch, query_length), ids(batch, document_length), ids(batch, document_length)


def keras_step(st_dir, query, positive, negative, jit_compile):
    """A function running one gtr-keras training step (through `fit`)."""
    encoder = GTRTextEmbedder.from_preset(st_dir)
    model = DualEncoder(encoder, temperature=TEMPERATURE)
    model.compile(optimizer=make_optimizer(steps=1000), jit_compile=jit_compile)
    model.optimizer.build(model.trainable_variables)

    def features(ids):
        return {"token_ids": ids, "padding_mask": np.ones_like(ids)}

    batch = {
        "query": features(query),
        "positive": features(positive),
        "negatives": features(negative[:, None, :]),
        "positive_id": np.arange(len(query), dtype=np.int64),
        "negative_ids": np.arange(len(query), 2 * len(query), dtype=np.int64)[:, None],
    }
    iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
    model.make_train_function()

    def step():
        float(model.train_function(iterator)["loss"])

    return step


def torch_step(st_dir, query, positive, negative):
    """A function running one sentence-transformers training step."""
    import torch
    from sentence_transformers import SentenceTransformer, losses

    model = SentenceTransformer(st_dir, device="cpu")
    model.train()
    loss = losses.MultipleNegativesSymmetricRankingLoss(model, scale=1 / TEMPERATURE)
    optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-3)
    features = [
        {"input_ids": torch.from_numpy(ids).long(), "attention_mask": torch.ones(ids.shape, dtype=torch.long)}
        for ids in (query, positive, negative)
    ]

    def step():
        optimizer.zero_grad()
        value = loss(features, labels=None)
        value.backward()
        optimizer.step()
        float(value)

    return step


def table(rows):
    lines = [
        "| config | parameters | B | Lq / Ld | library | median step | pairs/s | speed vs PyTorch |",
        "|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['parameters']:,} | {r['batch']} | {r['lengths']} | {r['library']} | "
            f"{r['seconds']:.3f} s | {r['pairs_per_s']:.1f} | {r['vs_torch']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--batch-size", type=int, default=16, help="triples per step")
    parser.add_argument("--query-length", type=int, default=32)
    parser.add_argument("--document-length", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per library")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per library")
    parser.add_argument("--xla", action="store_true", help="also time gtr-keras compiled with XLA")
    parser.add_argument(
        "--work-dir",
        default=os.path.expanduser("~/.cache/gtr-keras-benchmarks"),
        help="where the random checkpoints are cached",
    )
    parser.add_argument("--results", default=RESULTS, help="markdown file to append to")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)

    import sentence_transformers
    import torch

    started = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()
    rows = []
    for name in args.configs:
        st_dir = random_checkpoint(name, args.work_dir)
        data = triples(args.batch_size, args.query_length, args.document_length, CONFIGS[name]["vocab_size"])
        steps = {"sentence-transformers": torch_step(st_dir, *data), "gtr-keras": keras_step(st_dir, *data, False)}
        if args.xla:
            steps["gtr-keras XLA"] = keras_step(st_dir, *data, True)
        seconds = {
            name: statistics.median(times) for name, times in time_interleaved(steps, args.steps, args.warmup).items()
        }
        parameters = GTRTextEmbedder.from_preset(st_dir).count_params()
        for library, median in seconds.items():
            rows.append(
                {
                    "config": name,
                    "parameters": parameters,
                    "batch": args.batch_size,
                    "lengths": f"{args.query_length} / {args.document_length}",
                    "library": library,
                    "seconds": median,
                    "pairs_per_s": args.batch_size / median,
                    "vs_torch": seconds["sentence-transformers"] / median,
                }
            )
        print(table(rows), flush=True)
    load_after = os.getloadavg()

    command = rerun_command(__file__, argv)
    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    shapes = "; ".join(
        f"{n}: {c['num_layers']} layers, d_model {c['d_model']}, {c['num_heads']} heads x {c['d_kv']}, "
        f"d_ff {c['d_ff']}, vocabulary {c['vocab_size']}"
        for n, c in CONFIGS.items()
        if n in args.configs
    )
    ours = [r for r in rows if r["library"] == "gtr-keras"]
    met = ", ".join(
        f"{r['config']} {r['vs_torch']:.2f}x ({'met' if r['vs_torch'] >= 1.2 else 'NOT met'})" for r in ours
    )
    block = f"""### {started:%Y-%m-%d %H:%M} UTC: training pairs/s

Command: `{command}`

- Machine: {machine()}, {ram_gib:.0f} GiB RAM; 1-min load average {load_before[0]:.2f} before and
  {load_after[0]:.2f} after. TensorFlow {tf.__version__}, PyTorch {torch.__version__}
  ({torch.get_num_threads()} threads), sentence-transformers {sentence_transformers.__version__}.
- Shapes ({shapes}); the projection keeps d_model. Each pair is a query ({args.query_length} tokens), a
  positive and 1 hard negative ({args.document_length} tokens each), no padding, identical token ids and
  initial weights in both libraries.
- gtr-keras: `DualEncoder` + Keras Adafactor (`make_optimizer`), `model.compile` as `gtr-keras train` does
  (no XLA on CPU{"; the XLA row compiles with `jit_compile=True`" if args.xla else ""}).
  sentence-transformers: `MultipleNegativesSymmetricRankingLoss(scale=100)` + `torch.optim.Adafactor`.
  Dropout off in both. {args.warmup} warm-up steps, then medians of {args.steps} steps per library,
  the libraries taking turns.

{table(rows)}

Target (gtr-keras >= 1.2x sentence-transformers pairs/s): {met}.
"""
    publish(block, args.results, SECTION, record_it=not args.no_record)


if __name__ == "__main__":
    main()
