"""`distill`: a GTR student learns a teacher's in-batch similarities, in `train`'s loop."""

import json
import logging
import re
import signal
import subprocess
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from distillation_inputs import tiny_distillation, word_pairs, write_jsonl
from training_inputs import SPIECE, WORDS, final_weights, run_python

from gtr_keras.distillation.distillation_loop import distill, teacher_embeddings
from gtr_keras.distillation.teachers import load_teacher
from gtr_keras.errors import MismatchError
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.models.gtr.gtr_tokenizer import GTRTokenizer
from gtr_keras.training.losses import SimilarityDistillationLoss


def test_the_student_gets_closer_to_the_teacher_on_held_texts(tiny_model_dir, tmp_path):
    held = word_pairs(32, 1)
    queries, documents = [p["query"] for p in held], [p["positive"] for p in held]
    teacher = load_teacher(tiny_model_dir)
    teacher_queries, teacher_documents = teacher.encode_queries(queries), teacher.encode_documents(documents)
    gap = SimilarityDistillationLoss(0.05, 0.05)

    def distance(encoder):
        """KL of the student's in-batch score distributions from the teacher's, on the held pairs."""
        return float(
            gap(
                encoder.encode_queries(queries),
                encoder.encode_documents(documents),
                teacher_queries,
                teacher_documents,
                single=tf.zeros([len(held)], tf.bool),
            )
        )

    keras.utils.set_random_seed(0)  # the student's initial weights, as `distill` draws them with seed 0
    tokenizer = GTRTokenizer(open(SPIECE, "rb").read())
    untrained = GTRTextEmbedder.from_architecture(
        "gtr-tiny", num_layers=1, preprocessor=GTRTextEmbedderPreprocessor(tokenizer, 16, 8)
    )
    before = distance(untrained.batch_encoder())
    texts = write_jsonl(tmp_path / "train.jsonl", word_pairs(200, 0))
    student = distill(
        {
            "init": "gtr-tiny",
            "tokenizer": SPIECE,
            "model": {"num_layers": 1},
            "teacher": tiny_model_dir,
            "data": {"texts": [texts], "query_length": 8, "document_length": 16},
            "steps": 60,
            "batch_size": 16,
            "checkpoint_every": 60,
            "learning_rate": 0.01,
            "verbose": 0,
            "output_dir": str(tmp_path / "run"),
        }
    )
    after = distance(student)
    assert after < 0.5 * before, (before, after)  # measured: 1.72 -> 0.27


def test_a_rerun_with_changed_texts_is_refused_before_the_teacher_runs(tiny_model_dir, tmp_path, monkeypatch):
    config = tiny_distillation(tmp_path, tiny_model_dir)
    distill(config)
    pieces = sorted((tmp_path / "run" / "teacher_embeddings").rglob("piece-*.npz"))
    assert [p.parent.name for p in pieces] == ["documents", "queries"]
    monkeypatch.setattr("gtr_keras.distillation.teachers.load_teacher", lambda *a, **k: pytest.fail("teacher loaded"))
    pairs = word_pairs(40, 0)
    pairs[3]["positive"] = "another text"
    write_jsonl(tmp_path / "pairs.jsonl", pairs)
    with pytest.raises(MismatchError, match=r"the training data .*pairs.jsonl changed since the run started"):
        distill(config)


def test_a_cache_is_reused_and_one_of_other_texts_is_refused_naming_the_piece(tiny_model_dir, tmp_path, monkeypatch):
    teacher = load_teacher(tiny_model_dir)
    texts = [f"text {i}" for i in range(10)]
    first = teacher_embeddings(teacher, texts, "document", tmp_path / "cache", piece_size=4, verbose=0)
    np.testing.assert_allclose(first, teacher.encode_documents(texts), atol=1e-6)
    calls = []
    monkeypatch.setattr(type(teacher), "encode", lambda self, *args, **kwargs: calls.append(args))
    again = teacher_embeddings(teacher, texts, "document", tmp_path / "cache", piece_size=4, verbose=0)
    assert calls == [] and np.array_equal(again, first)  # the cache, read back
    texts[5] = "changed"
    with pytest.raises(MismatchError, match=r"piece 1 was encoded from other texts \(documents 4-7"):
        teacher_embeddings(teacher, texts, "document", tmp_path / "cache", piece_size=4, verbose=0)


def test_resume_with_another_teacher_is_refused(tiny_model_dir, tmp_path):
    from training_inputs import write_bert_text_embedder

    config = tiny_distillation(tmp_path, tiny_model_dir)
    distill(config)
    write_bert_text_embedder(tmp_path / "bert")
    with pytest.raises(MismatchError, match=r"this run reads the teacher model .*bert, the run being resumed read"):
        distill({**config, "teacher": str(tmp_path / "bert")})


DISTILL_SCRIPT = """
import json, sys, time
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from gtr_keras.distillation import distillation_loop
from gtr_keras.training import callbacks
config = json.loads(sys.argv[1])
if len(sys.argv) > 2:
    pause_at = int(sys.argv[2])
    def pausing(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == pause_at:
            time.sleep(600)
    callbacks.Checkpoints.on_train_batch_end = pausing
distillation_loop.distill(config)
"""


@pytest.mark.large
@pytest.mark.slow
def test_resume_after_sigkill_and_mirrored_runs_equal_an_uninterrupted_run(tiny_model_dir, tmp_path):
    base = tiny_distillation(tmp_path, tiny_model_dir, steps=8, seed=3)

    def run(name, *args, **settings):
        return run_python(DISTILL_SCRIPT, json.dumps({**base, "output_dir": str(tmp_path / name), **settings}), *args)

    assert run("straight").wait(timeout=300) == 0
    process = run("resumed", "3")
    checkpoint = tmp_path / "resumed" / "checkpoints" / "checkpoint"
    deadline = time.time() + 300
    while not checkpoint.exists():
        assert process.poll() is None and time.time() < deadline, "distillation ended before its first checkpoint"
        time.sleep(0.05)
    time.sleep(1.0)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "resumed" / "model").exists() and "ckpt-2" in checkpoint.read_text()
    assert run("resumed").wait(timeout=300) == 0
    # Two replicas with half the batch each: the score matrices are the global batch's, so the same weights.
    assert run("mirrored", strategy="mirrored").wait(timeout=300) == 0
    straight = final_weights(tmp_path / "straight")
    for name in ("resumed", "mirrored"):
        other = final_weights(tmp_path / name)
        assert other.keys() == straight.keys() and len(straight) > 5
        for key in straight:
            np.testing.assert_allclose(other[key], straight[key], atol=1e-5, rtol=0, err_msg=f"{name}: {key}")


@pytest.mark.large
@pytest.mark.slow
def test_the_cli_distils_and_bad_inputs_are_exit_2_and_one_line(tiny_model_dir, tmp_path):
    pairs = write_jsonl(tmp_path / "pairs.jsonl", word_pairs(16, 0))
    common = [
        "--student",
        "gtr-tiny",
        "--tokenizer",
        SPIECE,
        "--steps",
        "2",
        "--batch-size",
        "8",
        "--checkpoint-every",
        "2",
        "--query-length",
        "8",
        "--document-length",
        "16",
    ]

    def run(*argv):
        return subprocess.run(["gtr-keras", "distill", *argv], capture_output=True, text=True, timeout=300)

    done = run("--teacher", tiny_model_dir, "--texts", pairs, "--output-dir", str(tmp_path / "out"), *common)
    assert done.returncode == 0, done.stderr
    assert "distilled model written to" in done.stdout and (tmp_path / "out" / "model" / "config.json").exists()

    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.jsonl").write_text('{"query": "q", "positive": "d"}\n{"query": 3, "positive": "d"}\n')
    cases = [
        (["--teacher", str(tmp_path / "nope"), "--texts", pairs], "nope: no such teacher model directory"),
        (["--teacher", str(tmp_path / "empty"), "--texts", pairs], "not a text embedder"),
        (["--teacher", tiny_model_dir, "--texts", str(tmp_path / "none.txt")], "argument --texts: "),
        (
            ["--teacher", tiny_model_dir, "--texts", str(tmp_path / "bad.jsonl")],
            r"bad\.jsonl:2: field `query` must be a string",
        ),
        (["--teacher", tiny_model_dir, "--texts", pairs, "--mse-weight", "-1"], "argument --mse-weight: must be at"),
        (["--teacher", tiny_model_dir, "--texts", pairs, "--student", "gtr-nano"], "gtr-nano: no such model"),
    ]
    for number, (argv, message) in enumerate(cases):
        argv = [*common, *argv, "--output-dir", str(tmp_path / f"bad{number}")]
        result = run(*argv)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and re.search(message, lines[0]), (argv, result.stderr)
        assert not (tmp_path / f"bad{number}" / "model").exists()


def test_bfloat16_validation_and_keep_best_work_as_in_train(tiny_model_dir, tmp_path, caplog):
    from beir_files import write_beir

    from gtr_keras.beir.readers import Corpus

    corpus = Corpus([f"d{i}" for i in range(8)], [""] * 8, [f"the {w} and the river" for w in WORDS[:8]])
    validation = write_beir(
        tmp_path / "dev", corpus, {"q1": "cat", "q2": "dog"}, [("q1", "d0", 1), ("q2", "d1", 1)], split="dev"
    )
    config = tiny_distillation(
        tmp_path, tiny_model_dir, precision="bfloat16", validation_data=str(validation), keep_best=True, verbose=2
    )
    caplog.set_level(logging.INFO, logger="gtr_keras")
    student = distill(config)
    assert np.isfinite(student.encode_documents(["cat"])).all()
    out = caplog.text
    assert "validation at step 2: ndcg@10" in out and "validation at step 4: ndcg@10" in out
    assert json.loads((tmp_path / "run" / "best_model" / "validation.json").read_text())["precision"] == "bfloat16"
    assert json.loads((tmp_path / "run" / "train_config.json").read_text())["settings"]["precision"] == "bfloat16"


def test_validation_of_a_student_from_a_directory_uses_the_runs_token_budgets(tiny_model_dir, tmp_path):
    from beir_files import write_beir

    from gtr_keras.beir.dataset import load_dataset
    from gtr_keras.beir.evaluation import evaluate_run
    from gtr_keras.beir.readers import Corpus
    from gtr_keras.retrieval.runs import gtr_run

    # The student's directory keeps documents at 512 tokens; the run's are 16, which cut these documents.
    texts = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(30)) for i in range(12)]
    corpus = Corpus([f"d{i}" for i in range(12)], [""] * 12, texts)
    queries = {f"q{i}": " ".join(WORDS[(i + j) % len(WORDS)] for j in (20, 21, 22)) for i in range(12)}
    dev = write_beir(tmp_path / "dev", corpus, queries, [(f"q{i}", f"d{i}", 1) for i in range(12)], split="dev")
    config = tiny_distillation(
        tmp_path,
        tiny_model_dir,
        init=tiny_model_dir,
        tokenizer=None,
        model={},
        steps=2,
        validation_data=str(dev),
        keep_best=True,
    )
    distill(config)
    best = json.loads((tmp_path / "run" / "best_model" / "validation.json").read_text())
    saved = load_teacher(str(tmp_path / "run" / "best_model"))
    assert saved._encoder.document_length == 16
    corpus, queries, qrels, _ = load_dataset(str(dev), "dev")
    assert evaluate_run(qrels, gtr_run(saved, corpus, queries))["ndcg@10"] == pytest.approx(best["ndcg@10"])
