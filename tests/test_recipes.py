import json
import os
import subprocess
import sys

import pytest
from beir_files import write_beir

from gtr_keras.beir.readers import Corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()


@pytest.mark.large
@pytest.mark.slow
def test_msmarco_tpu_recipe_runs_on_cpu_with_gtr_tiny(tmp_path):
    triples = tmp_path / "triples.tsv"
    lines = []
    for i in range(64):
        words = [WORDS[(i * 7 + j) % len(WORDS)] for j in range(6)]
        lines.append(f"{' '.join(words[:3])} {i}\t{' '.join(words)} passage {i}\t{' '.join(reversed(words))} other {i}")
    triples.write_text("\n".join(lines) + "\n")
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": line.split("\t")[1]}) + "\n" for i, line in enumerate(lines))
    )
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": line.split("\t")[0]}) + "\n" for i, line in enumerate(lines[:10]))
    )
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(10))
    )
    out = tmp_path / "run"
    command = [
        sys.executable,
        os.path.join(REPO, "recipes", "msmarco_tpu", "train_msmarco.py"),
        "--init",
        "gtr-tiny",
        "--triples",
        str(triples),
        "--output-dir",
        str(out),
        "--steps",
        "4",
        "--batch-size",
        "8",
        "--document-length",
        "32",
        "--query-length",
        "16",
        "--eval-dataset",
        str(beir),
        "--checkpoint-every",
        "2",
        "--steps-per-execution",
        "2",
        "--validation-data",
        str(beir),
        "--validation-split",
        "test",
        "--keep-best",
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.exists(out / "model" / "model.weights.h5")
    assert "validation at step 2: ndcg@10" in result.stdout and "validation at step 4: ndcg@10" in result.stdout
    assert os.path.exists(out / "best_model" / "validation.json")
    metrics = json.loads((out / "eval.json").read_text())["metrics"]
    assert set(metrics) == {"ndcg@10", "mrr@10", "recall@100", "recall@1000", "map"}
    assert metrics["recall@100"] == 1.0  # 64 documents: all retrieved


NOTEBOOK = os.path.join(REPO, "recipes", "msmarco_tpu", "msmarco_tpu.ipynb")


def notebook_code_cells():
    with open(NOTEBOOK) as f:
        notebook = json.load(f)
    assert notebook["metadata"]["accelerator"] == "TPU"
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]


def test_notebook_has_one_place_for_its_settings_and_installs_the_runtime_only():
    cells = notebook_code_cells()
    settings = cells[0]
    assert settings.startswith("# Settings") and '\nTPU = ""' in settings and "\nRUNNING_IN_CI = False" in settings
    rest = "\n".join(cells[1:])
    for hard_coded in ("--tpu", "local", 'tpu="', "gs://", "YOUR_", "gtr-t5-base", "\nTPU =", "20000"):
        assert hard_coded not in rest, hard_coded
    assert "tpu=TPU" in rest and '"tpu": TPU' in rest and '"steps_per_execution": STEPS_PER_EXECUTION' in rest
    everything = "\n".join(cells)
    assert "[test]" not in everything and "YOUR_ORG" not in everything
    assert '"pip", "install", "-q", GTR_KERAS_SOURCE' in everything and "if not RUNNING_IN_CI:" in everything


@pytest.mark.large
@pytest.mark.slow
def test_notebook_cells_run_top_to_bottom_on_cpu_with_gtr_tiny(tmp_path):
    """The code cells in order, `!` and `%` lines (shell, IPython magics) left out, the settings overridden."""
    triples = tmp_path / "triples.tsv"
    n = len(WORDS)
    triples.write_text(
        "".join(
            f"what {WORDS[i % n]} {i}\tthe {WORDS[i % n]} passage {i}\tother {WORDS[(i + 5) % n]}\n" for i in range(32)
        )
    )
    documents = [f"the {WORDS[i]} passage {i}" for i in range(n)]
    beir = write_beir(
        tmp_path / "beir",
        Corpus([f"d{i}" for i in range(n)], [""] * n, documents),
        {f"q{i}": f"what {WORDS[i]}" for i in range(8)},
        [(f"q{i}", f"d{i}", 1) for i in range(8)],
    )
    overrides = f"""
RUNNING_IN_CI = True
STRATEGY, TPU = "default", None
TRIPLES, OUTPUT_DIR, INIT = {str(triples)!r}, {str(tmp_path / "run")!r}, "gtr-tiny"
STEPS, BATCH_SIZE, PRECISION = 4, 8, "float32"
QUERY_LENGTH, DOCUMENT_LENGTH = 16, 32
CHECKPOINT_EVERY, STEPS_PER_EXECUTION, LOG_EVERY = 2, 2, 2
VALIDATION_DATA, VALIDATION_SPLIT = {str(beir)!r}, "test"
EVAL_DATA = "cranfield"
"""
    cells = notebook_code_cells()
    cells.insert(1, overrides)
    script = "\n\n".join(
        "\n".join(line for line in cell.splitlines() if not line.lstrip().startswith(("!", "%"))) for cell in cells
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "validation at step 2: ndcg@10" in result.stdout and "validation at step 4: ndcg@10" in result.stdout
    assert "cranfield test" in result.stdout and "ndcg@10" in result.stdout.split("cranfield test")[0]
    for path in ("model/model.weights.h5", "best_model/validation.json", "checkpoints/checkpoint"):
        assert (tmp_path / "run" / path).exists(), path
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "run" / "logs"))


@pytest.mark.large
@pytest.mark.slow
def test_paper_miniature_ladder_makes_a_table_from_logged_cells(tmp_path):
    import gzip

    data = tmp_path / "data"
    (data / "debian-descriptions").mkdir(parents=True)
    with gzip.open(data / "debian-descriptions" / "pairs.jsonl.gz", "wt") as f:
        for i in range(40):
            words = [WORDS[(i * 3 + j) % len(WORDS)] for j in range(5)]
            f.write(json.dumps({"query": " ".join(words[:2]), "positive": " ".join(words) + f" tool {i}"}) + "\n")
    documents = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(6)) + f" study {i}" for i in range(30)]
    corpus = Corpus([f"d{i}" for i in range(30)], [""] * 30, documents)
    queries = {f"q{i}": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(2)) for i in range(30)}
    write_beir(
        data / "nfcorpus",
        corpus,
        queries,
        [(f"q{i}", f"d{d}", 1) for i in range(20) for d in (i, i + 1)],
        split="train",
    )
    write_beir(data / "nfcorpus", corpus, queries, [(f"q{i}", f"d{i}", 1) for i in range(20, 30)])
    write_beir(data / "zs", corpus, queries, [(f"q{i}", f"d{i}", 1) for i in range(10)])
    out = tmp_path / "out"
    script = os.path.join(REPO, "recipes", "paper_miniature", "ladder.py")
    settings = [
        "--data",
        str(data),
        "--out",
        str(out),
        "--sizes",
        "tiny",
        "--zero-shot",
        "zs",
        "--vocabulary-size",
        "150",
        "--pretrain-steps",
        "2",
        "--finetune-steps",
        "2",
        "--pretrain-batch-size",
        "8",
        "--finetune-batch-size",
        "8",
        "--query-length",
        "8",
        "--document-length",
        "16",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, script, "stages", *settings], capture_output=True, text=True, timeout=900, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (out / "tables" / "stages.md").read_text()
    assert "| tiny |" in table and "| BM25 |" in table and table.count(" / ") >= 4
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    cells = {r["cell"] for r in log}
    assert cells == {"tiny-pretrain", "tiny-finetune-only", "tiny-multistage", "bm25"}
    assert any(r["command"].startswith("gtr-keras mine") for r in log)
    assert all(r["seconds"] > 0 for r in log)
    assert "`python recipes/paper_miniature/ladder.py run tiny-multistage --data " in table
    # A cell that exists is reused: `run` trains and evaluates nothing new.
    result = subprocess.run(
        [sys.executable, script, "run", "tiny-multistage", *settings],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("tiny-multistage: nfcorpus ")
    assert len((out / "log.jsonl").read_text().splitlines()) == len(log)
    changed = subprocess.run(
        [sys.executable, script, "run", "tiny-multistage", *settings, "--finetune-steps", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert changed.returncode != 0 and "was made with other settings" in changed.stderr
    # The doc-length table reuses the trained cell and re-encodes documents at GTR's 512 tokens.
    result = subprocess.run(
        [sys.executable, script, "doc-length", *settings], capture_output=True, text=True, timeout=600, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (out / "tables" / "doc-length.md").read_text()
    assert "| tiny, documents encoded at 512 tokens |" in table and "| BM25 |" in table
    added = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()][len(log) :]
    assert {r["cell"] for r in added} == {"tiny-multistage-doc512"}
    assert all(r["command"].endswith("--document-length 512") for r in added)
    evaluated = json.loads((out / "results" / "tiny-multistage-doc512" / "zs.json").read_text())
    assert evaluated["document_length"] == 512


@pytest.mark.large
@pytest.mark.slow
def test_distill_cpu_evaluates_any_teacher_or_student_and_reports_a_table(tmp_path, tiny_model_dir):
    from training_inputs import write_bert_text_embedder

    corpus = Corpus([f"d{i}" for i in range(12)], [""] * 12, [f"{WORDS[i]} {WORDS[i + 1]} flow" for i in range(12)])
    queries = {f"q{i}": f"{WORDS[i]} {WORDS[i + 1]}" for i in range(0, 12, 3)}
    collection = write_beir(tmp_path / "toy", corpus, queries, [(f"q{i}", f"d{i}", 1) for i in range(0, 12, 3)])
    write_bert_text_embedder(tmp_path / "bert")
    results = tmp_path / "out" / "results"
    results.mkdir(parents=True)
    for name, model in (("student", tiny_model_dir), ("teacher", str(tmp_path / "bert"))):
        done = subprocess.run(
            [sys.executable, "recipes/distill_cpu/evaluate.py", model, str(collection), str(results / f"{name}.json")],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        record = (results / f"{name}.json").read_text()
        assert 0.0 <= json.loads(record)["ndcg@10"] <= 1.0 and json.loads(record)["documents"] == 12
        for dataset in ("scifact", "nfcorpus", "cranfield", "cisi", "cranfield-upper"):  # the report's inputs
            (results / f"{name}-{dataset}.json").write_text(record)
    (results / "times.txt").write_text("distill: 5 s\n")
    report = subprocess.run(
        [sys.executable, "recipes/distill_cpu/report.py", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    student = json.loads((results / "student-scifact.json").read_text())["ndcg@10"]
    assert f"| distilled student, stage 1 | {student:.4f} |" in report.stdout
    assert "| teacher all-MiniLM-L6-v2 |" in report.stdout and "- distill: 5 s" in report.stdout


@pytest.mark.large
def test_distill_cpu_evaluate_names_a_bad_dataset_line_before_loading_the_model(tmp_path):
    collection = tmp_path / "broken"
    (collection / "qrels").mkdir(parents=True)
    (collection / "corpus.jsonl").write_text('{"_id": "d1", "text": "flow"}\n{"_id": "d2", "text": \n')
    (collection / "queries.jsonl").write_text('{"_id": "q1", "text": "flow"}\n')
    (collection / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "recipes/distill_cpu/evaluate.py", str(tmp_path / "no-such-model"), str(collection), str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evaluate.py: error: ") and "corpus.jsonl:2" in lines[0], lines
    assert not out.exists()
