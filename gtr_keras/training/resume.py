"""The run record (`train_config.json`) of a training run and the checks a rerun makes against it:
settings, and the data, tokenizer and initial model by content.
"""

import hashlib
import json
import os

import tensorflow as tf

from gtr_keras.errors import CheckpointError, MismatchError
from gtr_keras.utils import files as fs

RUN_RECORD = "train_config.json"
LEFTOVERS = ("best_model", "spiece.model", "logs", "model")
NOT_COMPARED = (
    "output_dir",
    "checkpoint_every",
    "keep_checkpoints",
    "strategy",
    "tpu",
    "worker_timeout",
    "grad_cache_chunk_size",
    "deterministic",
    "verbose",
    # how steps are dispatched and what is logged or evaluated on the side: the weights stay the same
    "steps_per_execution",
    "log_every",
    "validation_data",
    "validation_split",
    "validate_every",
    "validation_max_queries",
    "keep_best",
    # paths: the files behind them are compared by content
    "init",
    "tokenizer",
    "data.source",
    "data.split",
    "data.negatives_file",
    "teacher",
    "data.texts",
    # distillation: the teacher's batches change its embeddings by rounding only
    "teacher_batch_size",
)
_HASH_CHUNK = 1 << 20


def file_sha256(path):
    """SHA-256 (hex) of a file's bytes, read 1 MiB at a time."""
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_inputs(config):
    """Fingerprints of the files a run reads, `{name: {"path", "sha256"}}`: `data.<role>` for each file
    of `TrainingData.files`, and `tokenizer` for a `tokenizer` file."""
    if config.tokenizer is not None and not fs.isfile(config.tokenizer):
        raise CheckpointError(f"{config.tokenizer}: no such SentencePiece model file (the `tokenizer` setting)")
    files = {f"data.{role}": path for role, path in config.data.files().items()}
    if config.tokenizer is not None:
        files["tokenizer"] = os.fspath(config.tokenizer)
    return {name: {"path": path, "sha256": file_sha256(path)} for name, path in files.items()}


# Settings that may differ between the workers of one run: where their files are, what they print. Unlike
# `NOT_COMPARED` (what a resume may change), the strategy and the checkpoint and validation steps must agree:
# every worker runs the same collectives at the same steps.
_WORKER_SETTINGS = (
    "output_dir",
    "keep_checkpoints",
    "verbose",
    "tpu",
    "worker_timeout",
    "init",
    "tokenizer",
    "data.source",
    "data.negatives_file",
    "teacher",
    "data.texts",
    "validation_data",
)


def worker_identity(record):
    """What every worker of a multi-worker run must share, from its run `record`: the settings but
    `_WORKER_SETTINGS`, and the inputs by content."""
    settings = {key: value for key, value in _flat_settings(record).items() if key not in _WORKER_SETTINGS}
    return {**settings, **{f"{name} (SHA-256)": value["sha256"] for name, value in record["inputs"].items()}}


def _flat_settings(record):
    settings = dict(record["settings"])
    data = settings.pop("data")
    return {**settings, **{f"data.{key}": value for key, value in data.items()}}


def _input_change(name, now, then):
    """What changed in an input (compared by content), in words; `None` if nothing did."""
    if now and then and now["sha256"] == then["sha256"]:
        return None
    what = {
        "init": "initial model",
        "tokenizer": "tokenizer",
        "data.negatives": "mined negatives",
        "teacher": "teacher model",
    }.get(name, "training data")
    if now and then and now["path"] == then["path"]:
        return f"the {what} {now['path']} changed since the run started"
    return (
        f"this run reads the {what} {now['path'] if now else 'none'}, "
        f"the run being resumed read {then['path'] if then else 'none'}"
    )


def check_resume(config, record, resumed, parts):
    """Raises `MismatchError` at the first difference between this run's `record` and the resumed run's,
    among `parts`: "settings", and the inputs named after "data", "tokenizer" or "init"."""
    changes = []
    if "settings" in parts:
        now, then = _flat_settings(record), _flat_settings(resumed)
        changes += [
            f"this run has {key}={now.get(key)}, the run being resumed has {key}={then.get(key)}"
            for key in {**now, **then}
            if key not in NOT_COMPARED
            and json.dumps(now.get(key), sort_keys=True) != json.dumps(then.get(key), sort_keys=True)
        ]
    for name in {**record["inputs"], **resumed["inputs"]}:
        if name.split(".")[0] in parts:
            changes.append(_input_change(name, record["inputs"].get(name), resumed["inputs"].get(name)))
    changes = [change for change in changes if change]
    if changes:
        raise MismatchError(
            f"{os.path.join(config.output_dir, RUN_RECORD)}: {changes[0]}; "
            f"use another --output-dir or delete {config.output_dir} to start over"
        )


def resumed_record(config):
    """The record of the run in `output_dir` to resume, or `None` for a new run."""
    path = os.path.join(config.output_dir, RUN_RECORD)
    start_over = f"use another --output-dir or delete {config.output_dir} to start over"
    if not fs.exists(path):
        if tf.train.latest_checkpoint(os.path.join(config.output_dir, "checkpoints")):
            raise MismatchError(f"{path}: missing, so the checkpoints beside it cannot be checked; {start_over}")
        # A new run writes its record first: these are another run's, which a new one would compete with
        # (best_model), reuse (spiece.model) or log beside (logs).
        for name in LEFTOVERS:
            if fs.exists(os.path.join(config.output_dir, name)):
                raise MismatchError(
                    f"{os.path.join(config.output_dir, name)}: left by another run ({path} is "
                    f"missing), which a new run would mix with its own; {start_over}"
                )
        return None
    try:
        record = json.loads(fs.read_bytes(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise MismatchError(f"{path}: unreadable ({error}); {start_over}") from None
    if not isinstance(record, dict) or not {"settings", "inputs"} <= set(record):
        raise MismatchError(f"{path}: not a run record (no settings and inputs); {start_over}")
    return record
