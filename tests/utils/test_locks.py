"""One writer per output: real processes hold real locks; a second writer is exit 2 naming the holder, a
killed holder leaves nothing that blocks the next run, and stale staging of killed runs is removed."""

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO
from training_inputs import SPIECE, write_triples

from gtr_keras.cli.main import main
from gtr_keras.errors import BusyError
from gtr_keras.utils.locks import output_lock

HOLDER = """
import sys, time
from contextlib import ExitStack
from gtr_keras.utils.locks import output_lock
with ExitStack() as stack:
    for path in sys.argv[1:]:
        stack.enter_context(output_lock(path))
    print("held", flush=True)
    time.sleep(600)
"""


def hold(*paths):
    """A process holding the locks of `paths` (it has said so when this returns); kill it to end them."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, *map(str, paths)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    assert selector.select(timeout=120), "the holder did not take its locks in 120 s"
    assert process.stdout.readline() == "held\n"
    return process


def kill(process):
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)


def test_a_held_output_is_refused_naming_the_holder_and_freed_when_the_holder_is_killed(tmp_path):
    out = tmp_path / "out"
    holder = hold(out)
    try:
        with pytest.raises(BusyError, match=rf"{out}: in use by another gtr-keras run \(.* pid {holder.pid} on "):
            with output_lock(out):
                pass
    finally:
        kill(holder)
    with output_lock(out):  # the kernel dropped the killed holder's lock
        assert (tmp_path / ".out.lock").exists()
    assert not (tmp_path / ".out.lock").exists()


def test_the_lock_is_reentrant_within_a_process(tmp_path):
    with output_lock(tmp_path / "out"):
        with output_lock(tmp_path / "out"):
            pass
        assert (tmp_path / ".out.lock").exists()


def test_a_lock_on_another_file_system_names_its_holder_and_a_dead_local_holder_is_taken_over():
    path = "ram://locks/out"
    with output_lock(path):
        note = json.loads(open_ram("ram://locks/.out.lock"))
        assert note["pid"] == os.getpid()
    from gtr_keras.utils import files

    files.remove("ram://locks/.out.lock")
    with files.open("ram://locks/.out.lock", "wb") as f:  # left by a process of this machine that is gone
        f.write(
            json.dumps(
                {"host": note["host"], "pid": 2**22 + 12345, "command": "gtr-keras index", "started": "then"}
            ).encode()
        )
    with output_lock(path):
        pass
    files.remove("ram://locks/.out.lock")
    with files.open("ram://locks/.out.lock", "wb") as f:  # a live holder (this process, as if another)
        f.write(json.dumps({**note, "command": "gtr-keras export"}).encode())
    with pytest.raises(BusyError, match=r"gtr-keras export, pid .*; if it is gone, delete ram://locks/\.out\.lock"):
        with output_lock(path):
            pass


def open_ram(path):
    from gtr_keras.utils import files

    return files.read_bytes(path).decode("utf-8")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("inputs")
    (root / "texts.txt").write_text("a wing\nlift on a wing\n")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": f"text {i}"}) + "\n" for i in range(5)))
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(root / "index")]) == 0
    (root / "ds" / "qrels").mkdir(parents=True)
    shutil.copy(corpus, root / "ds" / "corpus.jsonl")
    (root / "ds" / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "text 1"}) + "\n")
    (root / "ds" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\td1\t1\n")
    return root


def commands(model, inputs, out):
    return {
        "index": ["index", "--model", model, "--corpus", str(inputs / "corpus.jsonl"), "--out", out],
        "encode": ["encode", "--model", model, "--input", str(inputs / "texts.txt"), "--output", f"{out}.npy"],
        "export": ["export", "--model", model, "--index", str(inputs / "index"), "--out", out],
        "convert": ["convert", os.path.join(REPO, "tests", "fixtures", "tiny-gtr-st"), out],
        "train": [
            "train",
            "--init",
            "gtr-tiny",
            "--tokenizer",
            SPIECE,
            "--data",
            write_triples(inputs / "t.jsonl"),
            "--output-dir",
            out,
            "--steps",
            "2",
            "--batch-size",
            "4",
        ],
        "evaluate": ["evaluate", "--dataset", str(inputs / "ds"), "--retriever", "bm25", "--run-out", out],
        "mine": ["mine", "--model", model, "--dataset", str(inputs / "ds"), "--split", "test", "--out", out],
        "distill": [
            "distill",
            "--teacher",
            model,
            "--student",
            "gtr-tiny",
            "--tokenizer",
            SPIECE,
            "--texts",
            str(inputs / "texts.txt"),
            "--output-dir",
            out,
            "--steps",
            "2",
            "--batch-size",
            "2",
        ],
    }


@pytest.mark.slow
def test_every_writing_command_is_refused_while_another_run_holds_its_output(tmp_path, tiny_model_dir, inputs, capsys):
    argvs = commands(tiny_model_dir, inputs, str(tmp_path / "out"))
    outputs = {name: tmp_path / ("out.npy" if name == "encode" else "out") for name in argvs}
    holder = hold(*set(outputs.values()))
    try:
        for name, argv in argvs.items():
            assert main(argv) == 2, name
            error = capsys.readouterr().err.strip()
            assert (
                error
                == (
                    f"gtr-keras {name}: error: {outputs[name]}: in use by another gtr-keras run ("
                    f"{error.split(' run (')[1]}"
                )
                and f"pid {holder.pid} on " in error
            ), error
            assert not (tmp_path / "out").exists() and not (tmp_path / "out.npy").exists(), name
    finally:
        kill(holder)
    assert main(argvs["encode"]) == 0


@pytest.mark.large
@pytest.mark.slow
def test_two_index_runs_started_together_on_one_output_never_mix_their_corpora(tmp_path, tiny_model_dir, tiny_encoder):
    texts = {}
    for name in ("a", "b"):
        texts[name] = [f"{name} text number {i} about {name * (i % 7 + 1)}" for i in range(300)]
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts[name]))
        )
    out = tmp_path / "index"
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gtr_keras",
                "index",
                "--model",
                tiny_model_dir,
                "--corpus",
                str(tmp_path / f"{name}.jsonl"),
                "--out",
                str(out),
                "--piece-size",
                "20",
            ],
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in texts
    ]
    results = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
    assert all(code == 0 or (code == 2 and "in use by another gtr-keras run" in err) for code, err in results), results
    assert any(code == 0 for code, _ in results)
    from gtr_keras.storage.search_index import SearchIndex

    embeddings = SearchIndex.load(str(out / "index")).embeddings
    winner = min(texts, key=lambda name: np.abs(embeddings - tiny_encoder.encode_documents(texts[name])).max())
    np.testing.assert_allclose(embeddings, tiny_encoder.encode_documents(texts[winner]), atol=1e-5, rtol=0)


def test_a_run_holding_the_lock_removes_the_staging_that_killed_runs_left(tmp_path, tiny_model_dir, inputs):
    out = tmp_path / "exports"
    stale = [tmp_path / ".exports.tmp-killed", out / "encoder" / ".1.tmp-killed"]
    for path in stale:
        (path / "variables").mkdir(parents=True)
        (path / "variables" / "variables.data").write_bytes(b"\0" * 1000)
    keep = tmp_path / ".other.tmp-killed"  # another output's: not this run's to remove
    keep.mkdir()
    assert main(["export", "--model", tiny_model_dir, "--out", str(out)]) == 0
    assert not any(path.exists() for path in stale) and keep.exists()
    assert sorted(p.name for p in (out / "encoder").iterdir()) == ["1"]


KILLED_EXPORT = """
import sys, time
from gtr_keras.exports.savedmodel import export
write = export._write_encoder

def pausing(encoder, staging):
    write(encoder, staging)
    print("staged", flush=True)
    time.sleep(600)  # killed here, its staging written and not yet moved into place

export._write_encoder = pausing
from gtr_keras.cli.main import main
main(sys.argv[1:])
"""


@pytest.mark.large
@pytest.mark.slow
def test_a_killed_export_leaves_staging_that_the_next_export_removes(tmp_path, tiny_model_dir):
    out = tmp_path / "exports"
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_EXPORT, "export", "--model", tiny_model_dir, "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    assert selector.select(timeout=300), "the export did not reach its staging in 300 s"
    kill(process)
    left = list((out / "encoder").glob(".1.tmp-*"))
    assert len(left) == 1 and (left[0] / "saved_model.pb").exists() and not (out / "encoder" / "1").exists()
    assert main(["export", "--model", tiny_model_dir, "--out", str(out)]) == 0
    assert sorted(p.name for p in (out / "encoder").iterdir()) == ["1"]
    assert not list(tmp_path.glob(".*.lock")) and not list(out.glob(".*.lock"))


def test_stale_staging_is_matched_literally_and_a_previous_output_moved_aside_is_put_back(tmp_path):
    from gtr_keras.utils.files import remove_staging

    for folder in ("run[1]", "run1"):
        (tmp_path / folder / ".out.tmp-killed").mkdir(parents=True)
    remove_staging(tmp_path / "run[1]" / "out")
    assert not (tmp_path / "run[1]" / ".out.tmp-killed").exists()
    assert (tmp_path / "run1" / ".out.tmp-killed").exists()  # another output's, though the glob would match it
    aside = tmp_path / "run1" / ".model.tmp-abc-old"  # a commit killed between its two renames
    aside.mkdir()
    (aside / "config.json").write_text("{}")
    remove_staging(tmp_path / "run1" / "model")
    assert (tmp_path / "run1" / "model" / "config.json").read_text() == "{}" and not aside.exists()
    (tmp_path / "run1" / ".best_model.tmp-x").mkdir()
    (tmp_path / "run1" / ".export.tmp-y").mkdir()  # another command's output inside the run directory
    with output_lock(tmp_path / "run1", inside=("best_model",)):
        pass
    assert not (tmp_path / "run1" / ".best_model.tmp-x").exists() and (tmp_path / "run1" / ".export.tmp-y").exists()
