"""The GTR paper's claims in miniature, on 2 CPU cores: one command per table.

    python recipes/paper_miniature/ladder.py scaling          # paper Tables 3/4
    python recipes/paper_miniature/ladder.py stages           # Table 5
    python recipes/paper_miniature/ladder.py data-efficiency  # Table 6
    python recipes/paper_miniature/ladder.py bottleneck       # Figure 5
    python recipes/paper_miniature/ladder.py doc-length       # Figure 6
    python recipes/paper_miniature/ladder.py run small-multistage   # one cell

Every cell is a model trained with `gtr-keras train` (pre-training on Debian package descriptions,
fine-tuning on NFCorpus train with hard negatives mined by the pre-trained model) and evaluated
with `gtr-keras evaluate` in-domain on NFCorpus test and zero-shot on SciFact, Cranfield and CISI,
BM25 beside it. Cells are shared between tables and kept under `--out`: a table reuses the cells
that exist, and a killed run resumes where it stopped. Each command and its wall time is appended
to `OUT/log.jsonl`; each table is printed and written to `OUT/tables/TABLE.md`, with the command
and wall time of every cell and the commit it ran at.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from gtr_keras.beir import load_corpus, load_qrels, read_trec_run
from gtr_keras.beir.evaluation import median_length_analysis
from gtr_keras.models.gtr.gtr_tokenizer import train_sentencepiece
from gtr_keras.models.gtr.presets import parameter_count, preset_config
from gtr_keras.training import TrainingData
from gtr_keras.utils import files

SIZES = {
    "tiny": dict(num_layers=1, hidden_dim=32, key_value_dim=8, num_heads=4, intermediate_dim=64),
    "mini": dict(num_layers=2, hidden_dim=128, key_value_dim=32, num_heads=4, intermediate_dim=512),
    "small": dict(num_layers=4, hidden_dim=256, key_value_dim=64, num_heads=4, intermediate_dim=768),
    "medium": dict(num_layers=6, hidden_dim=384, key_value_dim=64, num_heads=6, intermediate_dim=1536),
}
LADDER = ("mini", "small", "medium")
BOTTLENECK_DIMS = (64, 128, 256, 768)
ENCODING_LENGTH = 512  # GTR's document length: the doc-length table also encodes documents at it
IN_DOMAIN = "nfcorpus"
METRIC = "ndcg@10"
SCRIPT = "python recipes/paper_miniature/ladder.py"


class Ladder:
    """The cells of the tables: which commands make them, run once, logged."""

    def __init__(self, args):
        self.args = args
        self.data, self.out = args.data, args.out
        self.zero_shot = args.zero_shot.split(",")
        self.commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                cwd=os.path.dirname(os.path.abspath(__file__)),
            ).stdout.strip()
            or "unknown"
        )
        files.makedirs(self.out)

    def path(self, *parts):
        return os.path.join(self.out, *parts)

    def execute(self, cell, command, done):
        """Runs `command` unless its output `done` exists; logs it with its wall time."""
        if files.exists(done):
            return
        print("+ " + " ".join(command), flush=True)
        start = time.time()
        subprocess.run(command, check=True)
        record = {
            "cell": cell,
            "command": " ".join(command),
            "seconds": round(time.time() - start, 1),
            "commit": self.commit,
        }
        with files.open(self.path("log.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")

    def log(self):
        if not files.exists(self.path("log.jsonl")):
            return []
        with files.open(self.path("log.jsonl"), "r") as f:
            return [json.loads(line) for line in f]

    def tokenizer(self):
        """One SentencePiece model for every size, trained on both stages' texts."""
        path = self.path("spiece.model")
        if not files.exists(path):
            texts = []
            for data in (self.pretraining_data, self.finetuning_data):
                examples = TrainingData(**data, num_negatives=0).examples()
                texts += [text for e in examples for text in (e.query, e.positive)]
            with files.atomic_outputs(path) as (staged,):
                train_sentencepiece(list(dict.fromkeys(texts)), str(staged), self.args.vocabulary_size)
        return path

    @property
    def pretraining_data(self):
        return {"source": os.path.join(self.data, "debian-descriptions", "pairs.jsonl.gz")}

    @property
    def finetuning_data(self):
        return {"source": os.path.join(self.data, IN_DOMAIN), "split": "train"}

    def train(self, cell, init, data, steps, batch_size, learning_rate, model=None):
        """Trains cell `cell` with a config file, `OUT/configs/CELL.json`."""
        lengths = {"query_length": self.args.query_length, "document_length": self.args.document_length}
        config = {
            "init": init,
            "output_dir": self.path("models", cell),
            "tokenizer": self.tokenizer(),
            "data": {**data, **lengths},
            "steps": steps,
            "batch_size": batch_size,
            "learning_rate": learning_rate,
            "checkpoint_every": max(1, steps // 4),
            "temperature": self.args.temperature,
            "seed": self.args.seed,
            "verbose": 2,
            **({"model": model} if model else {}),
        }
        config_path = self.path("configs", f"{cell}.json")
        files.makedirs(os.path.dirname(config_path))
        if files.exists(config_path):
            with files.open(config_path, "r") as f:
                if json.load(f) != config:
                    raise SystemExit(
                        f"{config_path}: cell {cell!r} was made with other settings; "
                        f"use another --out, or delete {self.path('models', cell)}"
                    )
        with files.atomic_file(config_path) as f:
            f.write(json.dumps(config, indent=2).encode())
        self.execute(
            cell, ["gtr-keras", "train", "--config", config_path], self.path("models", cell, "model", "config.json")
        )
        return self.path("models", cell, "model")

    def model(self, size, stage, dim=768):
        """Trains the `stage` model of `size` (and what it depends on); returns its name."""
        shape = {**SIZES[size], "vocabulary_size": self.args.vocabulary_size + 100, "embedding_dim": dim}
        pretrained = cell_name(size, "pretrain", dim)
        self.train(
            pretrained,
            "gtr-small",
            {**self.pretraining_data, "num_negatives": 0},
            self.args.pretrain_steps,
            self.args.pretrain_batch_size,
            self.args.learning_rate,
            shape,
        )
        if stage == "pretrain":
            return pretrained
        negatives = self.path("negatives", f"{pretrained}.jsonl")
        files.makedirs(os.path.dirname(negatives))
        self.execute(
            pretrained,
            [
                "gtr-keras",
                "mine",
                "--model",
                self.path("models", pretrained, "model"),
                "--dataset",
                os.path.join(self.data, IN_DOMAIN),
                "--split",
                "train",
                "--depth",
                "100",
                "--skip-top",
                "5",
                "--per-query",
                "5",
                "--no-progress",
                "--out",
                negatives,
            ],
            negatives,
        )
        data = {
            **self.finetuning_data,
            "negatives_file": negatives,
            "num_negatives": 1,
            "max_positives_per_query": self.args.max_positives_per_query,
        }
        cell = cell_name(size, stage, dim)
        steps, batch = self.args.finetune_steps, self.args.finetune_batch_size
        if stage == "multistage":
            self.train(
                cell, self.path("models", pretrained, "model"), data, steps, batch, self.args.finetune_learning_rate
            )
        elif stage == "multistage-10pct":
            self.train(
                cell,
                self.path("models", pretrained, "model"),
                {**data, "train_fraction": 0.1},
                steps,
                batch,
                self.args.finetune_learning_rate,
            )
        elif stage == "finetune-only":
            self.train(cell, "gtr-small", data, steps, batch, self.args.learning_rate, shape)
        else:
            raise ValueError(f"unknown stage {stage!r}")
        return cell

    def evaluate(self, cell, dataset):
        """NDCG@10 etc. of a cell (or `bm25`) on a dataset's test split; returns the metrics.

        `MODEL-docN` is cell MODEL's model encoding documents cut at N tokens instead of at its training length.
        """
        out = self.path("results", cell, f"{dataset}.json")
        files.makedirs(os.path.dirname(out))
        command = [
            "gtr-keras",
            "evaluate",
            "--dataset",
            os.path.join(self.data, dataset),
            "--output-json",
            out,
            "--run-out",
            out[: -len(".json")] + ".run",
        ]
        model, document_length = split_encoding(cell)
        if cell == "bm25":
            command += ["--retriever", "bm25"]
        else:
            command += ["--model", self.path("models", model, "model")]
            command += ["--document-length", str(document_length)] if document_length else []
        self.execute(cell, command, out)
        with files.open(out, "r") as f:
            return json.load(f)["metrics"]

    def scores(self, cell):
        """`{dataset: NDCG@10}` for the in-domain and zero-shot datasets, and the zero-shot mean."""
        values = {d: self.evaluate(cell, d)[METRIC] for d in (IN_DOMAIN, *self.zero_shot)}
        values["zero-shot avg"] = statistics.mean(values[d] for d in self.zero_shot)
        return values

    def cell_note(self, cell):
        records = [r for r in self.log() if r["cell"] == cell]
        seconds = sum(r["seconds"] for r in records)
        kinds = ", ".join(dict.fromkeys(r["command"].split()[1] for r in records))
        commits = sorted({r["commit"] for r in records}) or [self.commit]
        command = " ".join([SCRIPT, "run", cell, *self.args.settings])
        return f"`{command}`: {seconds:.0f} s ({kinds or 'nothing run'}), commit {', '.join(commits)}"


def split_encoding(cell):
    """`(model cell, document length)` of `MODEL-docN`; `(cell, None)` for any other cell.

    Example:
    >>> split_encoding("small-multistage-doc512"), split_encoding("small-multistage")
    (('small-multistage', 512), ('small-multistage', None))
    """
    match = re.fullmatch(r"(.+)-doc(\d+)", cell)
    return (match.group(1), int(match.group(2))) if match else (cell, None)


def cell_name(size, stage, dim=768):
    """`SIZE-STAGE`, with `-dDIM` for an embedding size other than GTR's 768."""
    return f"{size}-{stage}" + ("" if dim == 768 else f"-d{dim}")


def parse_cell(cell):
    """`(size, stage, dim, document length)` of a cell `SIZE-STAGE[-dDIM][-docN]` (length None without `-docN`).

    Example:
    >>> parse_cell("small-multistage-10pct"), parse_cell("mini-multistage-d64-doc512")
    (('small', 'multistage-10pct', 768, None), ('mini', 'multistage', 64, 512))
    """
    model, document_length = split_encoding(cell)
    size, _, stage = model.partition("-")
    match = re.fullmatch(r"(.+)-d(\d+)", stage)
    if match:
        return size, match.group(1), int(match.group(2)), document_length
    return size, stage, 768, document_length


def with_pretraining(cells):
    """`cells` in order, each fine-tuned cell preceded by the pre-training cell it mined its negatives with.

    Example:
    >>> with_pretraining(["mini-multistage-d64-doc512", "mini-pretrain-d64", "bm25"])
    ['mini-pretrain-d64', 'mini-multistage-d64-doc512', 'bm25']
    """
    ordered = []
    for cell in cells:
        if cell != "bm25":
            size, stage, dim, _ = parse_cell(cell)
            ordered += [] if stage == "pretrain" else [cell_name(size, "pretrain", dim)]
        ordered.append(cell)
    return list(dict.fromkeys(ordered))


def non_embedding_parameters(size, dim=768):
    config = preset_config("gtr-small", **SIZES[size], embedding_dim=dim)
    return parameter_count(config) - config["vocabulary_size"] * config["hidden_dim"]


def markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def score_table(ladder, cells, label):
    """Rows of NDCG@10 per dataset for `cells` (`{row label: cell}`), BM25 last."""
    columns = [IN_DOMAIN, *ladder.zero_shot, "zero-shot avg"]
    rows = []
    for name, cell in {**cells, "BM25": "bm25"}.items():
        values = ladder.scores(cell)
        rows.append([name, *(f"{values[c]:.4f}" for c in columns)])
    return markdown([label, *columns], rows)


def table_scaling(ladder):
    cells = {
        f"{size} ({non_embedding_parameters(size) / 1e6:.1f}M)": ladder.model(size, "multistage")
        for size in ladder.args.sizes
    }
    return score_table(ladder, cells, "size (non-embedding params)"), cells.values()


def stage_rows(ladder, stages):
    """One row per size of `IN_DOMAIN / zero-shot avg` NDCG@10 for `stages`, BM25 last."""
    rows, cells = [], []
    for size in ladder.args.sizes:
        stage_cells = [ladder.model(size, stage) for stage in stages]
        cells += stage_cells
        scores = [ladder.scores(cell) for cell in stage_cells]
        rows.append([size, *(f"{s[IN_DOMAIN]:.4f} / {s['zero-shot avg']:.4f}" for s in scores)])
    bm25 = ladder.scores("bm25")
    rows.append(["BM25", f"{bm25[IN_DOMAIN]:.4f} / {bm25['zero-shot avg']:.4f}", *[""] * (len(stages) - 1)])
    note = f"\n\nEach cell: {IN_DOMAIN} NDCG@10 / zero-shot average NDCG@10 ({', '.join(ladder.zero_shot)})."
    return rows, cells, note


def table_stages(ladder):
    rows, cells, note = stage_rows(ladder, ("finetune-only", "pretrain", "multistage"))
    return markdown(["size", "fine-tune only", "pre-train only", "pre-train + fine-tune"], rows) + note, cells


def table_data_efficiency(ladder):
    rows, cells, note = stage_rows(ladder, ("pretrain", "multistage-10pct", "multistage"))
    return markdown(["size", "no fine-tuning", "fine-tune on 10%", "fine-tune on 100%"], rows) + note, cells


def table_bottleneck(ladder):
    rows, cells = [], []
    for size in ladder.args.sizes[:2]:
        dim_cells = [ladder.model(size, "multistage", dim) for dim in BOTTLENECK_DIMS]
        cells += dim_cells
        rows.append([size, *(f"{ladder.scores(cell)['zero-shot avg']:.4f}" for cell in dim_cells)])
    rows.append(["BM25", f"{ladder.scores('bm25')['zero-shot avg']:.4f}", *[""] * (len(BOTTLENECK_DIMS) - 1)])
    header = ["size", *(f"D={dim}" for dim in BOTTLENECK_DIMS)]
    return markdown(header, rows) + "\n\nEach cell: zero-shot average NDCG@10.", cells


def table_doc_length(ladder):
    cells = {size: ladder.model(size, "multistage") for size in ladder.args.sizes}
    cells.update(
        {
            f"{size}, documents encoded at {ENCODING_LENGTH} tokens": f"{cell}-doc{ENCODING_LENGTH}"
            for size, cell in list(cells.items())
        }
    )
    rows = []
    judged = {
        d: (load_qrels(os.path.join(ladder.data, d), "test"), load_corpus(os.path.join(ladder.data, d)))
        for d in ladder.zero_shot
    }
    for name, cell in {**cells, "BM25": "bm25"}.items():
        row = [name, f"{ladder.scores(cell)['zero-shot avg']:.4f}"]
        for dataset, (qrels, corpus) in judged.items():
            run = read_trec_run(ladder.path("results", cell, f"{dataset}.run"))
            lengths = median_length_analysis(run, qrels, corpus)
            row.append(f"{lengths['median_words_top10']:.0f} (relevant {lengths['median_words_relevant']:.0f})")
        rows.append(row)
    note = (
        "\n\nEach dataset cell: median words of the top-10 retrieved documents (of the relevant documents). "
        f"Models are trained on documents cut at {ladder.args.document_length} tokens and encode them so, "
        f"except in the rows encoding at {ENCODING_LENGTH}."
    )
    return markdown(["model", "zero-shot avg NDCG@10", *ladder.zero_shot], rows) + note, cells.values()


TABLES = {
    "scaling": table_scaling,
    "stages": table_stages,
    "data-efficiency": table_data_efficiency,
    "bottleneck": table_bottleneck,
    "doc-length": table_doc_length,
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", choices=[*TABLES, "run"])
    parser.add_argument(
        "cell",
        nargs="?",
        help="with `run`: SIZE-STAGE[-dDIM][-docN] (e.g. small-multistage-d128, "
        "small-multistage-doc512: documents encoded at N tokens) or bm25",
    )
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--out", default="runs/paper_miniature")
    parser.add_argument(
        "--sizes",
        default=",".join(LADDER),
        type=lambda s: s.split(","),
        help=f"comma-separated, from {sorted(SIZES)} (bottleneck: the first two)",
    )
    parser.add_argument("--zero-shot", default="scifact,cranfield,cisi")
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--query-length", type=int, default=32)
    parser.add_argument("--document-length", type=int, default=128)
    parser.add_argument("--pretrain-steps", type=int, default=600)
    parser.add_argument("--pretrain-batch-size", type=int, default=64)
    parser.add_argument("--finetune-steps", type=int, default=400)
    parser.add_argument("--finetune-batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="from random initialisation")
    parser.add_argument("--finetune-learning-rate", type=float, default=1e-4, help="from a pre-trained model")
    parser.add_argument("--max-positives-per-query", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.sizes) - set(SIZES))
    if unknown:
        parser.error(f"unknown size(s) {unknown}; expected some of {sorted(SIZES)}")
    if (args.table == "run") != (args.cell is not None):
        parser.error("give a cell with `run`, and only with `run`")
    settings = []
    for dest, value in vars(args).items():
        text = ",".join(value) if isinstance(value, list) else str(value)
        if dest not in ("table", "cell") and text != str(parser.get_default(dest)):
            settings += ["--" + dest.replace("_", "-"), text]
    args.settings = settings
    return args


def run_cell(ladder, cell):
    if cell == "bm25":
        return "bm25: " + ", ".join(f"{k} {v:.4f}" for k, v in ladder.scores(cell).items())
    size, stage, dim, document_length = parse_cell(cell)
    if size not in SIZES:
        raise SystemExit(f"unknown size {size!r} in cell {cell!r}; expected one of {sorted(SIZES)}")
    name = ladder.model(size, stage, dim) + (f"-doc{document_length}" if document_length else "")
    return f"{name}: " + ", ".join(f"{k} {v:.4f}" for k, v in ladder.scores(name).items())


def main(argv=None):
    args = parse_args(argv)
    ladder = Ladder(args)
    if args.table == "run":
        print(run_cell(ladder, args.cell))
        return
    table, cells = TABLES[args.table](ladder)
    notes = "\n".join(f"- {cell}: {ladder.cell_note(cell)}" for cell in with_pretraining([*cells, "bm25"]))
    text = (
        f"{table}\n\nCells (command, wall time of the cell's own commands, commit; a fine-tuned cell's "
        f"pre-training and mining are its SIZE-pretrain[-dD] cell's):\n\n{notes}\n"
    )
    with files.atomic_file(ladder.path("tables", f"{args.table}.md")) as f:
        f.write(text.encode())
    print(text)


if __name__ == "__main__":
    sys.exit(main())
