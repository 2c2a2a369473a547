"""Texts and settings of tiny distillation runs, for the tests of `distill` and its parts."""

import json

import numpy as np
from training_inputs import SPIECE, WORDS


def word_pairs(count, seed):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        a, b, c, d = rng.choice(WORDS, 4, replace=False)
        pairs.append({"query": f"{a} {b} {c}", "positive": f"the {a} and {b} with {d} {c}"})
    return pairs


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(record) + "\n" for record in records)
    return str(path)


def tiny_distillation(tmp_path, teacher, **settings):
    """Settings of a 1-block gtr-tiny student on 40 pairs and 8 single texts, two checkpoints of 2 steps."""
    texts = [write_jsonl(tmp_path / "pairs.jsonl", word_pairs(40, 0)), str(tmp_path / "single.txt")]
    (tmp_path / "single.txt").write_text("\n".join(f"{w} by the {w} river" for w in WORDS[:8]) + "\n")
    return {
        "init": "gtr-tiny",
        "tokenizer": SPIECE,
        "model": {"num_layers": 1},
        "teacher": teacher,
        "data": {"texts": texts, "query_length": 8, "document_length": 16},
        "steps": 4,
        "batch_size": 8,
        "checkpoint_every": 2,
        "learning_rate": 0.01,
        "mse_weight": 1.0,
        "verbose": 0,
        "output_dir": str(tmp_path / "run"),
        **settings,
    }
