import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from training_inputs import ROOT, final_weights, free_ports, write_triples

from gtr_keras.cli.main import main
from gtr_keras.errors import UserError
from gtr_keras.training.distributed import (
    Cluster,
    distributed_batches,
    worker_directory,
)

TWO_WORKERS = {"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, "task": {"type": "worker", "index": 1}}


def cluster_of(config):
    return Cluster.from_environment({"TF_CONFIG": config if isinstance(config, str) else json.dumps(config)})


def test_cluster_from_tf_config_names_the_chief_and_the_tasks():
    cluster = cluster_of(TWO_WORKERS)
    assert not cluster.is_chief and cluster.task_number == 1
    assert [cluster.describe(n) for n in (0, 1)] == ["worker 0 (127.0.0.1:2222)", "worker 1 (127.0.0.1:2223)"]
    with_chief = cluster_of({"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, "task": {"type": "chief", "index": 0}})
    assert with_chief.is_chief and with_chief.tasks == [("chief", 0, "a:1"), ("worker", 0, "b:1")]
    assert cluster_of({**TWO_WORKERS, "task": {"type": "worker", "index": 0}}).is_chief


@pytest.mark.parametrize(
    "config, message",
    [
        ("", "not set"),
        ("{cluster", "not valid JSON"),
        ({"cluster": {"worker": ["a:1"], "ps": ["b:1"]}, "task": {"type": "worker", "index": 0}}, "job 'ps' is not"),
        ({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}, r'worker\[0\] must be "host:port"'),
        ({"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}, "a:1 is given to two tasks"),
        ({"cluster": {"worker": ["a:1"]}}, 'needs a "task" object'),
        ({"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}}, "task.type must be one of"),
        ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}}, "task.index must be 0 to 1"),
        ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker"}}, 'task has no "index"'),
        ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"index": 0}}, 'task has no "type"'),
        ({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}}, "task.index must be 0 to 0"),
        (
            {"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}},
            r"task.type must be one of \['worker'\]",
        ),
        ({"cluster": ["a:1"], "task": {"type": "worker", "index": 0}}, 'needs a "cluster" object'),
        (
            {"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}},
            "cluster.worker must be a non-empty list",
        ),
        (
            {"cluster": {"worker": ["127.0.0.1:2222", "localhost:2222"]}, "task": {"type": "worker", "index": 0}},
            r"127.0.0.1:2222 and localhost:2222 \(both 127.0.0.1:2222\) is given to two tasks, "
            r"cluster.worker\[0\] and ",
        ),
        (
            {"cluster": {"chief": ["localhost:7"], "worker": ["LOCALHOST:7"]}, "task": {"type": "chief", "index": 0}},
            r"localhost:7 and LOCALHOST:7 .* two tasks, cluster.chief\[0\] and cluster.worker\[0\]",
        ),
    ],
)
def test_a_missing_or_malformed_tf_config_names_the_variable_and_the_fault(config, message):
    with pytest.raises(UserError, match=f"^TF_CONFIG: .*{message}.*--strategy multi-worker needs it"):
        cluster_of(config)


def test_a_port_that_another_program_holds_is_named_before_anything_starts():
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        cluster = cluster_of(
            {"cluster": {"worker": ["127.0.0.1:1", f"localhost:{port}"]}, "task": {"type": "worker", "index": 1}}
        )
        with pytest.raises(
            UserError,
            match=f"^TF_CONFIG: worker 1 \\(localhost:{port}\\): port {port} is in use by "
            "another program on this machine \\(address in use\\)",
        ):
            cluster.check_port_free()
    cluster.check_port_free()  # free again


def test_the_lost_task_is_named_from_the_error_or_by_its_silent_port():
    cluster = cluster_of({**TWO_WORKERS, "task": {"type": "worker", "index": 0}})
    assert cluster.lost_task("from remote target /job:worker/replica:0/task:1 while calling") == 1
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    silent = cluster_of(
        {"cluster": {"worker": ["127.0.0.1:1", f"127.0.0.1:{free}"]}, "task": {"type": "worker", "index": 0}}
    )
    assert silent.lost_task("Connection reset by peer") == 1


def test_a_worker_directory_is_removed_and_a_killed_workers_is_cleared(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    stale = tmp_path / "gtr-keras-worker1-999999999-abc"  # no such process
    stale.mkdir()
    live = tmp_path / f"gtr-keras-worker1-{os.getppid()}-abc"
    live.mkdir()
    with worker_directory(cluster_of(TWO_WORKERS)) as path:
        assert os.path.isdir(path) and not stale.exists() and live.exists()
    assert not os.path.exists(path)


def rows_of(dataset):
    return [int(batch.numpy()[0]) for batch in dataset]


def test_each_replica_gets_its_rows_of_the_global_batch_in_order():
    def make_batches(rows):
        batches = tf.data.Dataset.range(24).batch(8)
        return batches if rows is None else batches.map(lambda b: b[rows[0] : rows[1]])

    default = distributed_batches(tf.distribute.get_strategy(), make_batches, 8)
    assert [list(b.numpy()) for b in default] == [list(range(i, i + 8)) for i in (0, 8, 16)]
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    seen = [
        [list(part.numpy()) for part in mirrored.experimental_local_results(batch)]
        for batch in distributed_batches(mirrored, make_batches, 8)
    ]
    assert seen == [[list(range(i, i + 4)), list(range(i + 4, i + 8))] for i in (0, 8, 16)]


# Runs `gtr-keras ARGS`; with STOP_AT=N, this process sends itself STOP_WITH (default SIGKILL) once step N's
# checkpoint is saved, and prints when.
WORKER = """
import os, signal, sys, time
from gtr_keras.training import callbacks
stop_at, stop_with = int(os.environ.get("STOP_AT", 0)), getattr(signal, os.environ.get("STOP_WITH", "SIGKILL"))
save = callbacks.Checkpoints.on_epoch_end
def on_epoch_end(self, epoch, logs=None):
    save(self, epoch, logs)
    if self.step == stop_at:
        print(f"signal sent at {time.time()}", flush=True)
        os.kill(os.getpid(), stop_with)
callbacks.Checkpoints.on_epoch_end = on_epoch_end
from gtr_keras.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def start_workers(args, logs, stop_at=None, timeout=60, stop_with="SIGKILL", stopped=1, addresses=None, indexes=(0, 1)):
    """Starts `gtr-keras ARGS` as the workers `indexes` of a 2-worker cluster on 127.0.0.1 (free ports unless
    `addresses`), their output in `logs`/worker{0,1}.log; worker `stopped` signals itself at `stop_at`."""
    addresses = addresses or [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in indexes:
        env = {
            **os.environ,
            "PYTHONPATH": ROOT,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_CONFIG": json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}),
        }
        if stop_at and index == stopped:
            env.update(STOP_AT=str(stop_at), STOP_WITH=stop_with)
        with open(os.path.join(logs, f"worker{index}.log"), "w") as log:
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        WORKER,
                        *args,
                        "--strategy",
                        "multi-worker",
                        "--worker-timeout",
                        str(timeout),
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        processes[-1].log = os.path.join(logs, f"worker{index}.log")
    return processes, addresses


def finish(processes, timeout=240):
    """`[(status, output)]` of the workers, waiting at most `timeout` seconds in all; each process's `ended`
    is when it was seen to end."""
    deadline = time.time() + timeout
    try:
        while any(process.poll() is None for process in processes) and time.time() < deadline:
            time.sleep(0.1)
            for process in processes:
                if process.poll() is not None and not hasattr(process, "ended"):
                    process.ended = time.time()
    finally:
        for process in processes:
            process.kill()
    return [(process.wait(), open(process.log).read()) for process in processes]


def error_lines(output, command="train"):
    return [line for line in output.splitlines() if line.startswith(f"gtr-keras {command}: ")]


def train_losses(log_dir):
    from training.test_dual_encoder import tensorboard_scalars

    return dict(tensorboard_scalars(log_dir)["train/loss"])


def step_one_losses(model_dir, data):
    """The loss of the first global batch of 8 under the initial weights: with the global batch's candidates,
    and with each half's own (what per-worker negatives would give)."""
    from gtr_keras.saving import load_model
    from gtr_keras.training.data import TrainingData
    from gtr_keras.training.dual_encoder import DualEncoder

    keras.utils.set_random_seed(0)  # as `train` does: the shuffle's order depends on the global seed
    encoder = load_model(model_dir).model
    training_data = TrainingData(source=data, query_length=16, document_length=32)
    batch = next(iter(training_data.dataset(encoder.preprocessor.tokenizer, 8, drop_remainder=True)))
    model = DualEncoder(encoder)
    embeddings = model._embed(batch, training=False)

    def loss(rows):
        part = {name: value[rows] for name, value in embeddings.items()}
        return float(
            model.contrastive_loss(
                part["query"],
                part["positive"],
                part["negatives"],
                batch["positive_id"][rows],
                batch["negative_ids"][rows],
                query_ids=batch["query_id"][rows],
            )
        )

    return loss(slice(0, 8)), (loss(slice(0, 4)) + loss(slice(4, 8))) / 2


@pytest.mark.large
@pytest.mark.slow
def test_two_workers_train_like_one_process_write_only_the_chiefs_output_and_survive_a_lost_worker(
    tiny_model_dir, tmp_path
):
    data = write_triples(tmp_path / "data.jsonl", 48)
    args = [
        "--init",
        tiny_model_dir,
        "--data",
        data,
        "--steps",
        "12",
        "--batch-size",
        "8",
        "--seed",
        "0",
        "--checkpoint-every",
        "3",
        "--log-every",
        "1",
        "--query-length",
        "16",
        "--document-length",
        "32",
    ]
    single = tmp_path / "single"
    assert main(["train", *args, "--output-dir", str(single)]) == 0

    # Worker 1 is SIGKILLed at step 6: the chief ends, naming it, with its checkpoint of step 6 kept.
    out = tmp_path / "multi"
    processes, addresses = start_workers(["train", *args, "--output-dir", str(out)], tmp_path, stop_at=6)
    began = time.time()
    (status, output), (killed, _) = finish(processes)
    assert killed == -signal.SIGKILL
    assert status == 2 and time.time() - began < 200, output
    last = [line for line in output.splitlines() if line.startswith("gtr-keras train: error:")]
    assert len(last) == 1 and f"lost worker 1 ({addresses[1]})" in last[0] and "checkpoints/ckpt-6" in last[0], output
    assert not (out / "model").exists()
    assert tf.train.latest_checkpoint(str(out / "checkpoints")).endswith("ckpt-6")

    # Rerun: the workers resume from the chief's checkpoint and end with the single process's weights.
    results = finish(start_workers(["train", *args, "--output-dir", str(out)], tmp_path)[0])
    assert [status for status, _ in results] == [0, 0], results
    assert "which wrote the model to" in results[1][1]
    reference, trained = final_weights(single), final_weights(out)
    assert trained.keys() == reference.keys() and len(reference) > 5
    for key in reference:
        np.testing.assert_allclose(trained[key], reference[key], atol=1e-5, rtol=0, err_msg=key)

    # Every step's loss is the one process's (the global batch's negatives); per-worker negatives would differ.
    single_losses, multi_losses = train_losses(single / "logs"), train_losses(out / "logs")
    assert sorted(multi_losses) == sorted(single_losses) == list(range(1, 13))
    np.testing.assert_allclose(
        [multi_losses[s] for s in range(1, 13)], [single_losses[s] for s in range(1, 13)], atol=1e-5, rtol=0
    )
    global_loss, per_worker_loss = step_one_losses(tiny_model_dir, data)
    assert abs(multi_losses[1] - global_loss) < 1e-4 and abs(per_worker_loss - global_loss) > 1e-2

    # Only the chief wrote the output directory; worker 1's temporary directories and locks are gone.
    assert sorted(os.listdir(out)) == sorted(os.listdir(single))
    assert not [name for name in os.listdir(tempfile.gettempdir()) if "gtr-keras-worker1-" in name]

    # A check that fails on the chief alone (a resume with other settings) ends every worker with its line.
    processes, addresses = start_workers(["train", *args, "--steps", "13", "--output-dir", str(out)], tmp_path)
    results = finish(processes)
    errors = [
        [line for line in output.splitlines() if line.startswith("gtr-keras train: error:")] for _, output in results
    ]
    assert [status for status, _ in results] == [2, 2] and all(len(lines) == 1 for lines in errors), results
    assert "this run has steps=13, the run being resumed has steps=12" in errors[0][0]
    assert errors[1][0].startswith(f"gtr-keras train: error: worker 0 ({addresses[0]}) stopped: ")


@pytest.mark.large
@pytest.mark.slow
def test_two_workers_distill_the_weights_of_one_process(tiny_model_dir, tmp_path):
    from distillation_inputs import tiny_distillation

    # From a preset without a tokenizer: the chief trains the SentencePiece model and sends it to worker 1.
    settings = tiny_distillation(tmp_path, tiny_model_dir, sentencepiece_vocabulary_size=60)
    del settings["tokenizer"]
    config = tmp_path / "distill.json"
    config.write_text(json.dumps(settings))
    assert main(["distill", "--config", str(config), "--output-dir", str(tmp_path / "single")]) == 0
    results = finish(
        start_workers(["distill", "--config", str(config), "--output-dir", str(tmp_path / "multi")], tmp_path)[0]
    )
    assert [status for status, _ in results] == [0, 0], results
    reference, trained = final_weights(tmp_path / "single"), final_weights(tmp_path / "multi")
    assert trained.keys() == reference.keys() and len(reference) > 5
    for key in reference:
        np.testing.assert_allclose(trained[key], reference[key], atol=1e-5, rtol=0, err_msg=key)
    assert sorted(os.listdir(tmp_path / "multi")) == sorted(os.listdir(tmp_path / "single"))


def test_multi_worker_without_tf_config_is_exit_2_before_reading_the_data(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    data = write_triples(tmp_path / "data.jsonl", 8)
    status = main(
        [
            "train",
            "--init",
            "gtr-tiny",
            "--data",
            data,
            "--output-dir",
            str(tmp_path / "out"),
            "--strategy",
            "multi-worker",
        ]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("gtr-keras train: error: TF_CONFIG: not set")
    assert not (tmp_path / "out").exists()


def tiny_run(tiny_model_dir, tmp_path, steps=12):
    data = write_triples(tmp_path / "data.jsonl", 48)
    return [
        "train",
        "--init",
        tiny_model_dir,
        "--data",
        data,
        "--steps",
        str(steps),
        "--batch-size",
        "8",
        "--seed",
        "0",
        "--checkpoint-every",
        "3",
        "--query-length",
        "16",
        "--document-length",
        "32",
        "--output-dir",
        str(tmp_path / "out"),
    ]


START_UP_MARGIN = 40  # seconds past --worker-timeout: Python's and TensorFlow's start-up on a busy machine


@pytest.mark.large
def test_absent_or_blocked_peers_end_every_worker_within_the_worker_timeout_naming_the_peer(tiny_model_dir, tmp_path):
    args = tiny_run(tiny_model_dir, tmp_path)
    # Worker 1's port is held by another program: it says so at once; the chief ends after --worker-timeout.
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        addresses = [f"127.0.0.1:{free_ports(1)[0]}", f"127.0.0.1:{port}"]
        began = time.time()
        processes, _ = start_workers(args, tmp_path, timeout=5, addresses=addresses)
        results = finish(processes, timeout=5 + START_UP_MARGIN + 30)
    assert [status for status, _ in results] == [2, 2], results
    assert processes[0].ended - began < 5 + START_UP_MARGIN, results
    (chief,), (blocked,) = (error_lines(output) for _, output in results)
    assert blocked == (
        f"gtr-keras train: error: TF_CONFIG: worker 1 ({addresses[1]}): port {port} is in "
        "use by another program on this machine (address in use); stop it, or give this task a free "
        "port in every worker's TF_CONFIG"
    )
    assert chief.startswith(
        f"gtr-keras train: error: TF_CONFIG: worker 1 ({addresses[1]}) did not join the cluster within 5 s"
    ), chief
    # The chief (the coordination service's leader) never starts: worker 1 ends naming it.
    began = time.time()
    processes, addresses = start_workers(args, tmp_path, timeout=5, indexes=(1,))
    ((status, output),) = finish(processes, timeout=5 + START_UP_MARGIN + 30)
    assert status == 2 and processes[0].ended - began < 5 + START_UP_MARGIN, output
    assert error_lines(output) == [
        f"gtr-keras train: error: TF_CONFIG: worker 0 ({addresses[0]}) did not join the "
        "cluster within 5 s (DeadlineExceededError); start every worker it lists with the "
        "same command, or raise --worker-timeout"
    ], output
    assert not (tmp_path / "out").exists()


def test_one_address_under_two_names_is_exit_2_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(
        "TF_CONFIG",
        json.dumps(
            {"cluster": {"worker": ["127.0.0.1:2222", "localhost:2222"]}, "task": {"type": "worker", "index": 1}}
        ),
    )
    status = main(
        [
            "train",
            "--init",
            "gtr-tiny",
            "--data",
            write_triples(tmp_path / "data.jsonl", 8),
            "--output-dir",
            str(tmp_path / "out"),
            "--strategy",
            "multi-worker",
        ]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and lines == [
        "gtr-keras train: error: TF_CONFIG: the address 127.0.0.1:2222 and localhost:2222 (both 127.0.0.1:2222) is "
        "given to two tasks, cluster.worker[0] and cluster.worker[1]; --strategy multi-worker needs it on every "
        'worker, e.g. TF_CONFIG=\'{"cluster": {"worker": ["host0:2222", "host1:2222"]}, "task": {"type": "worker", '
        '"index": 0}}\''
    ]
    assert not (tmp_path / "out").exists()


def signal_time(output):
    return float(next(line for line in output.splitlines() if line.startswith("signal sent at ")).split()[-1])


@pytest.mark.large
@pytest.mark.slow
def test_sigterm_to_any_worker_ends_every_worker_at_once_and_a_rerun_resumes(tiny_model_dir, tmp_path):
    args = tiny_run(tiny_model_dir, tmp_path)
    out = tmp_path / "out"
    # SIGTERM to the chief after its checkpoint of step 6: it stops at once (143), worker 1 ends naming it.
    processes, addresses = start_workers(args, tmp_path, stop_at=6, stop_with="SIGTERM", stopped=0)
    results = finish(processes)
    assert [status for status, _ in results] == [143, 2], results
    sent = signal_time(results[0][1])
    assert max(process.ended for process in processes) - sent < 15, results
    assert error_lines(results[0][1]) == [
        f"gtr-keras train: stopped by SIGTERM; the last checkpoint is "
        f"{out}/checkpoints/ckpt-6: rerun every worker with the same command to "
        "resume from it"
    ], results
    (lost,) = error_lines(results[1][1])
    assert lost.startswith(f"gtr-keras train: error: lost worker 0 ({addresses[0]})"), lost
    assert tf.train.latest_checkpoint(str(out / "checkpoints")).endswith("ckpt-6")
    # SIGTERM to worker 1 after step 9 of the rerun (which resumed from step 6): the chief ends naming it.
    processes, addresses = start_workers(args, tmp_path, stop_at=9, stop_with="SIGTERM", stopped=1)
    results = finish(processes)
    assert [status for status, _ in results] == [2, 143], results
    assert max(process.ended for process in processes) - signal_time(results[1][1]) < 15, results
    assert error_lines(results[1][1]) == [
        "gtr-keras train: stopped by SIGTERM; the chief keeps the last checkpoint: "
        "rerun every worker with the same command to resume from it"
    ], results
    (lost,) = error_lines(results[0][1])
    assert lost.startswith(f"gtr-keras train: error: lost worker 1 ({addresses[1]})"), lost
    assert "checkpoints/ckpt-9" in lost or "checkpoints/ckpt-6" in lost, lost
    # The last rerun ends with the weights of one uninterrupted process.
    results = finish(start_workers(args, tmp_path)[0])
    assert [status for status, _ in results] == [0, 0], results
    (tmp_path / "single").mkdir()
    assert main(tiny_run(tiny_model_dir, tmp_path / "single")) == 0
    single, trained = final_weights(tmp_path / "single" / "out"), final_weights(out)
    for key in single:
        np.testing.assert_allclose(trained[key], single[key], atol=1e-5, rtol=0, err_msg=key)


@pytest.mark.large
@pytest.mark.parametrize(
    "name, whys",
    [
        ("SIGTERM", ["was stopped by SIGTERM as the workers joined"]),
        # SIGINT ends the chief once the workers have joined, or before worker 1 has (a race): both name it.
        ("SIGINT", ["(UnavailableError in a collective)", "did not join the cluster"]),
    ],
)
def test_a_signal_while_the_workers_join_ends_every_worker(tiny_model_dir, tmp_path, name, whys):
    args = tiny_run(tiny_model_dir, tmp_path)
    (chief,), addresses = start_workers(args, tmp_path, indexes=(0,))
    deadline = time.time() + 60
    while not cluster_of({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": 1}}).answers(0):
        assert time.time() < deadline and chief.poll() is None, open(chief.log).read()
        time.sleep(0.2)
    chief.send_signal(getattr(signal, name))  # the chief waits for worker 1 to join
    sent = time.time()
    time.sleep(1.5)
    (worker,), _ = start_workers(args, tmp_path, addresses=addresses, indexes=(1,))
    results = finish([chief, worker], timeout=120)
    assert [status for status, _ in results] == [128 + getattr(signal, name), 2], results
    assert max(chief.ended, worker.ended) - sent < 40, results  # worker 1's start-up, then seconds
    assert error_lines(results[0][1]) == [
        f"gtr-keras train: stopped by {name}; the last checkpoint is none yet: "
        "rerun every worker with the same command to resume from it"
    ], results
    (line,) = error_lines(results[1][1])
    assert line.startswith("gtr-keras train: error: "), line
    assert any(f"worker 0 ({addresses[0]}) {why}" in line for why in whys), line
    assert (
        line.endswith("the chief keeps the last checkpoint: rerun every worker with the same command to resume from it")
        or "did not join the cluster" in line
    ), line
