"""`train(config)`, the loop behind `gtr-keras train`, and `run_training`, the loop that `distill` shares.

Checkpoints every `checkpoint_every` steps (model, optimizer and step; the data position is
recovered by skipping the batches already seen, so a run killed and resumed ends with the same
weights as an uninterrupted one; a rerun whose settings or inputs would change the weights is
refused, `resume`), `steps_per_execution` steps per call into the device, TensorBoard scalars,
validation and keep-best (`callbacks`), a clear stop on a NaN loss, and the final model written as
a gtr-keras model directory.
"""

import dataclasses
import functools
import hashlib
import itertools
import json
import math
import os
import warnings

import keras
import tensorflow as tf

from gtr_keras.errors import CheckpointError, MismatchError, TrainingError, UserError
from gtr_keras.models.gtr.encoder import Encoder
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.models.gtr.gtr_tokenizer import GTRTokenizer, train_sentencepiece
from gtr_keras.models.gtr.presets import PRESET_SOURCES, PRESETS, preset_config
from gtr_keras.models.model_files.fingerprint import fingerprint
from gtr_keras.models.model_files.model_source import DOWNLOAD_PREFIXES
from gtr_keras.saving import load_model, save
from gtr_keras.training.callbacks import (
    BEST_MODEL,
    Checkpoints,
    Progress,
    Scalars,
    Validation,
    validation_collection,
)
from gtr_keras.training.config import TrainConfig, dtype_policy, make_strategy
from gtr_keras.training.distributed import (
    Cluster,
    broadcast_bytes,
    broadcast_variables,
    check_same_run,
    distributed_batches,
    lost_worker_error,
    stopping_on_signals,
    watching,
    worker_directory,
)
from gtr_keras.training.dual_encoder import DualEncoder, make_optimizer, require_tensorflow_backend
from gtr_keras.training.resume import (
    RUN_RECORD,
    check_resume,
    file_inputs,
    resumed_record,
    worker_identity,
)
from gtr_keras.utils import files as fs
from gtr_keras.utils.files import atomic_file, atomic_outputs
from gtr_keras.utils.locks import locks_output

_SENTENCEPIECE_TEXTS = 200_000


def _training_texts(data):
    """Distinct texts of the training data: a BEIR collection repeats each document once per query
    that judged it (NFCorpus: 31 times on average), which would multiply SentencePiece's work."""
    texts = itertools.chain.from_iterable((e.query, e.positive, *e.negatives) for e in data.examples())
    seen = set()
    distinct = (t for t in texts if not (t in seen or seen.add(t)))
    return itertools.islice(distinct, _SENTENCEPIECE_TEXTS)


def _is_directory(path):
    """True for a directory on any file system, or a trained model's name that names one (the bundled model's; a
    `DataError` for a file system TensorFlow does not know)."""
    path = PRESET_SOURCES.get(path, path)
    return not path.startswith(DOWNLOAD_PREFIXES) and fs.exists(path) and fs.isdir(path)


def _tokenizer_file(config):
    """The run's SentencePiece model file, or None for the initial model directory's own; from a preset
    without a `tokenizer`, one is trained on the training texts (once: a resumed run reuses it)."""
    if config.tokenizer or _is_directory(config.init):
        return config.tokenizer
    path = os.path.join(config.output_dir, "spiece.model")
    if not fs.exists(path):
        preset = preset_config(config.init, **config.model)
        size = config.sentencepiece_vocabulary_size or preset["vocabulary_size"] - 100
        with atomic_outputs(path) as (staged,):
            train_sentencepiece(
                _training_texts(config.data),
                str(staged),
                vocabulary_size=size,
                case_folding=config.sentencepiece_case_folding,
            )
    return path


def _initial_encoder(config, policy):
    """The `GTRTextEmbedder` a run starts from (build it under the strategy's scope), and the
    fingerprint of what determines it: `fingerprint.fingerprint` of a model directory's model, or the
    SHA-256 of a preset's architecture (the random weights follow from it and `seed`)."""
    if _is_directory(config.init):
        model = load_model(config.init, dtype=policy).model
        return model, fingerprint(model)
    architecture = json.dumps(preset_config(config.init, **config.model), sort_keys=True)
    model = GTRTextEmbedder.from_architecture(config.init, dtype=policy, **config.model)
    return model, hashlib.sha256(architecture.encode("utf-8")).hexdigest()


def _set_preprocessor(config, model, strategy, cluster):
    """Gives the initial model the run's tokenizer (`_tokenizer_file`, else its own) and token budgets. In a
    multi-worker run, a tokenizer trained for a preset is the chief's, sent to the others."""
    path = None
    if cluster is not None and not config.tokenizer and not _is_directory(config.init):
        proto = fs.read_bytes(_tokenizer_file(config)) if cluster.is_chief else b""
        tokenizer = GTRTokenizer(broadcast_bytes(strategy, cluster, proto))
    else:
        path = _tokenizer_file(config)
        # A tokenizer file carries no lowercasing: a model directory's (a converted do_lower_case checkpoint) stays.
        lowercase = model.preprocessor is not None and model.preprocessor.tokenizer.lowercase
        tokenizer = GTRTokenizer(fs.read_bytes(path), lowercase=lowercase) if path else model.preprocessor.tokenizer
    if tokenizer.vocabulary_size() > model.backbone.vocabulary_size:
        raise MismatchError(
            f"{path or 'the tokenizer'}: the tokenizer has {tokenizer.vocabulary_size()} pieces but the initial model "
            f"{config.init} only {model.backbone.vocabulary_size} embedding rows; use a tokenizer with fewer pieces"
        )
    model.preprocessor = GTRTextEmbedderPreprocessor(tokenizer, config.data.document_length, config.data.query_length)


@dataclasses.dataclass(frozen=True)
class TrainedModel:
    """How a run of `run_training` builds, prepares, saves and returns the model it trains: a GTR embedder
    (`gtr_model()`, what `train` and `distill` train) or a reranker (`reranker_training`).

    Args:
        initial: `initial(config, policy)` -> `(model, fingerprint)`: the model a run starts from (built
            under the strategy's scope) and the SHA-256 of what determines it, recorded and compared on resume.
        prepare: `prepare(config, model, strategy, cluster)`: gives the model the run's tokenizer and budgets.
        save: `save(model, directory)`: writes the final model directory.
        result: `result(model)` -> what the run returns.
    """

    initial: object
    prepare: object
    save: object
    result: object


def gtr_model():
    """The `TrainedModel` of a GTR embedder (`train`, `distill`), of this module's functions as they are now."""
    return TrainedModel(_initial_encoder, _set_preprocessor, save, lambda model: model.batch_encoder())


def _checked_start(config, record, inputs, chief, strategy):
    """The checks of a run's start, in the order that fails fastest, filling `record`'s inputs; returns
    `(resumed run record or None, validation collection or None, strategy)` (the strategy is created here
    unless given). Only the chief of a multi-worker run validates and reads the data through: the others'
    inputs are compared with the chief's by their SHA-256 (`check_same_run`)."""
    resumed = resumed_record(config)
    if resumed:
        check_resume(config, record, resumed, ("settings",))
    validation = validation_collection(config) if chief else None  # small: read before the data is hashed
    record["inputs"] = file_inputs(config)
    if resumed:
        check_resume(config, record, resumed, ("data", "tokenizer"))
    elif chief:
        config.data.check()
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    if strategy is None:
        strategy = make_strategy(config.strategy, config.tpu)
    if inputs:  # after the strategy: connecting to a TPU resets TensorFlow's state
        further = inputs()
        record["inputs"].update(further)
        if resumed:
            check_resume(config, record, resumed, tuple(further))
    return resumed, validation, strategy


def train(config: TrainConfig) -> Encoder:
    """Trains a GTR dual encoder and writes the model directory `output_dir/model`.

    A new run first reads the training data through once (`TrainingData.check`),
    then records its settings and fingerprints of its inputs in
    `output_dir/train_config.json`: the SHA-256 of every training data file
    (`TrainingData.files`; read in full, the one sure way to see a change) and
    of the tokenizer file, and the initial model's (`fingerprint.fingerprint`
    of a model directory, the architecture of a preset). Rerunning with the
    same `output_dir` resumes from the latest checkpoint once these match
    (`TrainConfig` says which settings count): the weights, optimizer state
    and step are restored and the batches already seen are skipped, so the
    result equals an uninterrupted run's.

    Keras epochs are `TrainConfig.epoch_length()` steps; the step, a NaN
    loss (the epoch's mean) and the weights are checked, checkpoints saved
    and `validation_data` evaluated only between epochs, and TensorBoard
    points (`output_dir/logs`) are written from the metrics Keras fetches
    after each execution of `steps_per_execution` steps. With `keep_best`,
    `output_dir/best_model` holds the model of the best validation NDCG@10
    (a resumed run keeps competing with it).

    Args:
        config: a `TrainConfig`, or a dict of its settings.

    Returns:
        The trained `Encoder`.

    Raises:
        UserError: a bad setting, or Keras on a backend other than TensorFlow.
        DataError: training or validation data that is missing, malformed
            or empty.
        CheckpointError: `init` is neither a model directory nor a preset,
            or the `tokenizer` file is missing.
        MismatchError: `output_dir` holds a run of other settings or inputs.
        TrainingError: the loss became NaN, or the data ran out.

    Example:
    >>> encoder = train({"init": "gtr-base", "output_dir": "runs/gtr",
    ...                  "data": {"source": "triples.tsv"}, "steps": 20000})  # doctest: +SKIP
    """
    if isinstance(config, dict):
        config = TrainConfig.from_dict(config)

    def dual_encoder(encoder):
        return DualEncoder(
            encoder,
            config.temperature,
            config.mask_false_negatives,
            config.grad_cache_chunk_size,
            config.matryoshka_dims,
        )

    def make_dataset(run, tokenizer, batch_size, **kwargs):
        return functools.partial(run.data.dataset, tokenizer, batch_size, **kwargs)

    return run_training(config, dual_encoder, make_dataset)


def run_training(config, make_model, make_dataset, inputs=None, command="train", trained=None):
    """The loop of `train`, for any Keras model that trains a `GTRTextEmbedder` (`distill` uses it too).

    With the `multi-worker` strategy, every worker runs this with the same
    config: the chief (`distributed.Cluster`) as any run does; the others
    with their output in a temporary directory that is removed at the end
    (`distributed.worker_directory`), the chief's tokenizer, restored
    weights and step, and no validation or final model.

    Args:
        config: a `TrainConfig` (or a subclass's instance).
        make_model: `make_model(encoder)` -> the model to `fit`, with the
            initial `GTRTextEmbedder` as its `encoder`; called under the
            strategy's scope.
        make_dataset: `make_dataset(config, tokenizer, batch_size, seed=,
            skip_batches=, drop_remainder=, pad_to_length=)` -> `batches`,
            where `batches(rows=)` is the dataset of the rows `(start, stop)`
            of every global batch (all of them for `None`); `config` is the
            run's (a worker's output directory is its own).
        inputs: optional `inputs()` -> `{name: {"path", "sha256"}}` of further
            inputs to record and compare on resume (called once the data is
            checked, before the model is built).
        command: the `gtr-keras` command that runs this, for the line a
            multi-worker run prints when a signal stops it
            (`distributed.stopping_on_signals`).
        trained: the `TrainedModel` the run trains (None: a GTR embedder, `gtr_model()`).

    Returns:
        The trained `Encoder`.
    """
    require_tensorflow_backend("gtr-keras training")
    trained = trained or gtr_model()
    if config.strategy != "multi-worker":
        return _run_training(config, make_model, make_dataset, inputs, trained=trained)
    cluster = Cluster.from_environment()

    def kept():
        if not cluster.is_chief:
            return "the chief keeps the last checkpoint"
        latest = tf.train.latest_checkpoint(os.path.join(config.output_dir, "checkpoints"))
        return f"the last checkpoint is {latest or 'none yet'}"

    with stopping_on_signals(cluster, command, kept) as joined:
        # First: the strategy configures collectives, which TensorFlow allows only before its runtime starts
        # (reading a TFRecord file to check it would start it).
        strategy = make_strategy(config.strategy, cluster=cluster, worker_timeout=config.worker_timeout)
        joined()
        try:
            with watching(cluster):
                if cluster.is_chief:
                    return _run_training(config, make_model, make_dataset, inputs, cluster, strategy, trained)
                with worker_directory(cluster) as scratch:
                    # A worker keeps one checkpoint: its copies only match the chief's collectives.
                    worker = dataclasses.replace(config, output_dir=scratch, keep_checkpoints=1)
                    return _run_training(worker, make_model, make_dataset, inputs, cluster, strategy, trained)
        except tf.errors.OpError as error:
            lost = lost_worker_error(cluster, error, kept())
            if lost is None:
                raise
            raise lost from None


@locks_output("config.output_dir", inside=("model", BEST_MODEL, RUN_RECORD, "spiece.model"))
def _run_training(config, make_model, make_dataset, inputs=None, cluster=None, strategy=None, trained=None):
    policy = dtype_policy(config.precision)
    trained = trained or gtr_model()
    if config.init not in PRESETS and not _is_directory(config.init):
        raise CheckpointError(f"{config.init}: no such model directory and not a preset name ({', '.join(PRESETS)})")
    settings = config.to_dict()
    settings["data"]["format"] = config.data.resolved_format()
    record = {"settings": settings, "inputs": {}}
    chief = cluster is None or cluster.is_chief
    failure = None
    try:
        resumed, validation, strategy = _checked_start(config, record, inputs, chief, strategy)
    except UserError as error:  # in a multi-worker run, every worker is told, then raises
        if cluster is None:
            raise
        failure, resumed, validation = error, None, None
    if cluster is not None:
        check_same_run(strategy, cluster, worker_identity(record) if failure is None else {}, failure)
    replicas = strategy.num_replicas_in_sync
    chunk = config.grad_cache_chunk_size or 1
    if config.batch_size % (replicas * chunk):
        raise UserError(
            f"batch_size {config.batch_size} must split evenly over {replicas} replica(s)"
            + (f" into GradCache chunks of {chunk}" if config.grad_cache_chunk_size else "")
        )
    with strategy.scope():
        encoder, init_fingerprint = trained.initial(config, policy)
    record["inputs"]["init"] = {"path": os.fspath(config.init), "sha256": init_fingerprint}
    try:
        if resumed:
            check_resume(config, record, resumed, ("init",))
    except MismatchError as error:
        if cluster is None:
            raise
        failure = error
    if cluster is not None:
        check_same_run(strategy, cluster, {"init (SHA-256)": init_fingerprint}, failure)
    if not resumed:
        fs.makedirs(config.output_dir)
        with atomic_file(os.path.join(config.output_dir, RUN_RECORD)) as f:
            f.write(json.dumps(record, indent=2, default=os.fspath).encode("utf-8"))

    trained.prepare(config, encoder, strategy, cluster)
    with strategy.scope():
        model = make_model(encoder)
        optimizer = make_optimizer(config.steps, config.learning_rate)
        model.compile(optimizer=optimizer, steps_per_execution=config.resolved_steps_per_execution())
        optimizer.build(model.trainable_variables)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        # Created now on every worker: `restore` (the chief's) or the first `save` would create it later, and
        # creating a variable under a multi-worker strategy is a collective that every worker must join.
        checkpoint.save_counter  # noqa: B018
        checkpoints = os.path.join(config.output_dir, "checkpoints")
        # TensorFlow's staging of a checkpoint write that was killed or failed (no other run writes here: this
        # one holds the output's lock).
        for stale in fs.listdir(checkpoints) if fs.isdir(checkpoints) else []:
            if stale.rstrip("/").endswith("_temp"):
                fs.remove(os.path.join(checkpoints, stale.rstrip("/")))
        manager = tf.train.CheckpointManager(checkpoint, checkpoints, max_to_keep=config.keep_checkpoints)
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    if cluster is not None:
        broadcast_variables(strategy, [*model.variables, *optimizer.variables])
    start = int(optimizer.iterations.numpy())
    if start < config.steps:
        # The batches already seen are skipped and the dataset ends with the last step: the final epoch
        # (and the first, when checkpoint_every changed on resume) may be shorter, and the run stops there.
        batches = make_dataset(
            config,
            encoder.preprocessor.tokenizer,
            config.batch_size,
            seed=config.seed,
            skip_batches=start,
            drop_remainder=True,
            pad_to_length=config.strategy == "tpu",
        )
        dataset = distributed_batches(
            strategy, lambda rows: batches(rows=rows).take(config.steps - start), config.batch_size
        )
        length = config.epoch_length()
        checkpoints = Checkpoints(manager, start, config.steps, config.checkpoint_every, length)
        writer = tf.summary.create_file_writer(os.path.join(config.output_dir, "logs"))
        callbacks = [
            checkpoints,
            Scalars(writer, checkpoints, config.steps, config.log_every, config.resolved_steps_per_execution()),
        ]
        if validation:
            callbacks.append(Validation(config, checkpoints, writer, validation))
        if config.verbose:
            callbacks.insert(0, Progress())
        first_epoch = start // length
        try:
            with config.data.surface_errors(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Your input ran out of data")  # the run's last epoch
                model.fit(
                    dataset,
                    initial_epoch=first_epoch,
                    epochs=first_epoch + math.ceil((config.steps - start) / length),
                    steps_per_epoch=length,
                    callbacks=callbacks,
                    shuffle=False,
                    verbose=config.verbose,
                )
        finally:
            writer.close()
        if checkpoints.nan_step is not None:
            last = manager.latest_checkpoint or "none was saved"
            raise TrainingError(
                f"training stopped: the loss or the weights became NaN by step {checkpoints.nan_step} "
                f"(last good checkpoint: {last}); lower learning_rate, train in float32, or check the data."
            )
        if checkpoints.step < config.steps:
            raise TrainingError(
                f"the training data ran out after {checkpoints.step} of {config.steps} steps: "
                f"{config.data.source} gave no complete batch of {config.batch_size} examples"
                + (" with at least one hard negative" if config.data.num_negatives else "")
            )
    if chief:
        trained.save(encoder, os.path.join(config.output_dir, "model"))
    if cluster is not None:  # the others wait for the chief's model: every worker ends together
        check_same_run(strategy, cluster, {})
    return trained.result(encoder)
