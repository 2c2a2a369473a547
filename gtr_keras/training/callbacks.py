"""The training loop's Keras callbacks: checkpoints (and the NaN stop), TensorBoard scalars against
the global step, validation on a small BEIR dev set with keep-best, and the progress bar. Nothing
is read back from the device between executions but the metrics Keras hands to callbacks.
"""

import itertools
import json
import logging
import math
import os
import time

import keras
import tensorflow as tf

from gtr_keras.errors import DataError
from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.model_files.model_directory import PRESET_DIRECTORY
from gtr_keras.utils import files as fs
from gtr_keras.utils.file_operations import perform
from gtr_keras.utils.records import read_json_object, strings_sha256

logger = logging.getLogger(__name__)

VALIDATION_DEPTH = 100
BEST_MODEL = "best_model"
BEST_MODEL_RECORD = "validation.json"
BEST_MODEL_DIRECTORY = fs.DirectoryKind(
    "a run's best model", PRESET_DIRECTORY.marks, (*PRESET_DIRECTORY.names, BEST_MODEL_RECORD)
)


def _learning_rate_at(optimizer, step):
    """The optimizer's learning rate at `step`, computed on the host from its schedule (no device read)."""
    rate = getattr(optimizer, "_learning_rate", None)
    with tf.device("/cpu:0"):
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            return float(rate(step))
        return float(optimizer.learning_rate)


class Checkpoints(keras.callbacks.Callback):
    """Runs at the end of each Keras epoch only (`TrainConfig.epoch_length` steps), never between
    batches: reads the step (the one device read of the interval), stops at `steps` or when the data
    ran out, notes a NaN loss (the epoch's mean, averaged on the device) or non-finite weights, and
    saves a checkpoint when the epoch reached a multiple of `checkpoint_every` or the end of the run."""

    def __init__(self, manager, start, steps, every, epoch_length):
        super().__init__()
        self.manager = manager
        self.steps = steps
        self.every = every
        self.epoch_length = epoch_length
        self.step = self.saved_step = self.epoch_start = start
        self.nan_step = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start = self.step

    def on_epoch_end(self, epoch, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())
        if self.step >= self.steps or self.step < self.epoch_start + self.epoch_length:
            self.model.stop_training = True  # the end (the dataset holds the steps left), or the data ran out
        loss = (logs or {}).get("loss")
        if self.nan_step is None and loss is not None and not math.isfinite(loss):
            self.nan_step = self.step
        if self.nan_step is not None:
            self.model.stop_training = True
            return
        due = self.step // self.every > self.epoch_start // self.every or self.model.stop_training
        if not due or self.step == self.saved_step:
            return
        variables = self.model.trainable_variables
        if bool(tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in variables]))):
            perform("write", os.path.join(self.manager.directory, f"ckpt-{self.step}"))  # TensorFlow's own write
            self.manager.save(checkpoint_number=self.step)
            self.saved_step = self.step
        else:
            self.nan_step = self.step
            self.model.stop_training = True


class Scalars(keras.callbacks.Callback):
    """TensorBoard points every `log_every` steps against the global step: `train/loss` and
    `train/accuracy`, the means over the steps since the previous point, and `train/learning_rate`.

    It reads nothing from the device: Keras hands every callback the metrics of each execution
    (`steps_per_execution` steps) as Python numbers, the running means `m_n` of the epoch's first `n`
    steps, so a window's sum is `m_n * n - m_p * p`; the step is counted on the host. A loss that is
    not finite stops the run at the end of the execution.
    """

    def __init__(self, writer, clock, steps, log_every, steps_per_execution):
        super().__init__()
        self.writer = writer
        self.clock = clock
        self.steps = steps
        self.log_every = log_every
        self.steps_per_execution = steps_per_execution
        self.carried = (0, 0.0, 0.0)  # steps, loss sum, accuracy sum since the last point, from past epochs

    def on_epoch_begin(self, epoch, logs=None):
        self.start = self.clock.step
        self.last = (0, 0.0, 0.0)  # the epoch's steps, loss mean and accuracy mean at its last point

    def _since_last(self, done, loss, accuracy):
        """(steps, loss sum, accuracy sum) since the last point, given the epoch's means after `done` steps."""
        seen, seen_loss, seen_accuracy = self.last
        count, loss_sum, accuracy_sum = self.carried
        return (
            count + done - seen,
            loss_sum + loss * done - seen_loss * seen,
            accuracy_sum + accuracy * done - seen_accuracy * seen,
        )

    def on_train_batch_end(self, batch, logs=None):
        done = min(batch + 1, self.steps - self.start)  # steps of the epoch so far (the last execution may be short)
        previous = (done - 1) // self.steps_per_execution * self.steps_per_execution
        step = self.start + done
        if step // self.log_every == (self.start + previous) // self.log_every or not logs or "loss" not in logs:
            return
        loss, accuracy = logs["loss"], logs.get("accuracy", math.nan)
        if not math.isfinite(loss):
            self.model.stop_training = True
        count, loss_sum, accuracy_sum = self._since_last(done, loss, accuracy)
        with self.writer.as_default(step=step), tf.device("/cpu:0"):
            tf.summary.scalar("train/loss", loss_sum / count)
            tf.summary.scalar("train/accuracy", accuracy_sum / count)
            tf.summary.scalar("train/learning_rate", _learning_rate_at(self.model.optimizer, step))
        self.last, self.carried = (done, loss, accuracy), (0, 0.0, 0.0)

    def on_epoch_end(self, epoch, logs=None):
        done = self.clock.step - self.start
        if logs and "loss" in logs and done > self.last[0]:
            self.carried = self._since_last(done, logs["loss"], logs.get("accuracy", math.nan))
        self.writer.flush()


class Validation(keras.callbacks.Callback):
    """Validates at the end of the Keras epochs that reach a multiple of `every` steps, and at the end
    of the run: NDCG@10 and Recall@100 of exact search over the validation corpus with the weights
    being trained, written to TensorBoard (`val/ndcg@10`, `val/recall@100`) and printed; with
    `keep_best`, the best model so far is kept in `output_dir/best_model`."""

    def __init__(self, config, clock, writer, collection):
        super().__init__()
        self.config = config
        self.clock = clock
        self.writer = writer
        self.corpus, self.queries, self.qrels = collection
        self.collection_sha256 = collection_sha256(collection) if config.keep_best else None
        self.every = config.validate_every or config.checkpoint_every
        self.best = best_so_far(config, self.collection_sha256)
        self.validated_step = None
        self._host_model = None

    def _embedder(self):
        """The embedder to encode with: the one being trained, or under a TPU strategy a host copy of it."""
        embedder = self.model.encoder
        if self.config.strategy != "tpu":
            return embedder
        with tf.device("/cpu:0"):
            if self._host_model is None:
                backbone = GTRBackbone.from_config(embedder.backbone.get_config())
                self._host_model = GTRTextEmbedder(backbone, embedder.preprocessor, embedder.embedding_dim)
            self._host_model.set_weights(embedder.get_weights())
        return self._host_model

    def validate(self):
        """`{"ndcg@10", "recall@100"}` of the model as it is now."""
        from gtr_keras.beir.evaluation import evaluate_run
        from gtr_keras.retrieval.runs import gtr_run

        embedder = self._embedder()
        run = gtr_run(embedder.batch_encoder(), self.corpus, self.queries, depth=VALIDATION_DEPTH, progress=False)
        metrics = evaluate_run(self.qrels, run)
        return embedder, {"ndcg@10": metrics["ndcg@10"], "recall@100": metrics["recall@100"]}

    def on_epoch_end(self, epoch, logs=None):
        step = self.clock.step
        due = step // self.every > self.clock.epoch_start // self.every or step >= self.config.steps
        if self.clock.nan_step is not None or not due or step == self.validated_step:
            return
        began = time.perf_counter()
        embedder, metrics = self.validate()
        self.validated_step = step
        with self.writer.as_default(step=step), tf.device("/cpu:0"):
            for name, value in metrics.items():
                tf.summary.scalar(f"val/{name}", value)
        self.writer.flush()
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in metrics.items()})
        line = (
            f"validation at step {step}: ndcg@10 {metrics['ndcg@10']:.4f}, recall@100 "
            f"{metrics['recall@100']:.4f} ({len(self.queries)} queries, {len(self.corpus)} documents, "
            f"{time.perf_counter() - began:.1f} s)"
        )
        if self.config.keep_best and (self.best is None or metrics["ndcg@10"] > self.best):
            self.best = metrics["ndcg@10"]
            record = {
                "step": step,
                **metrics,
                **_validation_settings(self.config),
                "validation_sha256": self.collection_sha256,
                "precision": self.config.precision,
            }
            with fs.atomic_directory(
                os.path.join(self.config.output_dir, BEST_MODEL), [BEST_MODEL_DIRECTORY]
            ) as staging:
                embedder.save_to_preset(str(staging))
                (staging / BEST_MODEL_RECORD).write_text(json.dumps(record, indent=2, default=os.fspath) + "\n")
            line += f"; best so far, saved to {os.path.join(self.config.output_dir, BEST_MODEL)}"
        if self.config.verbose:
            logger.info("%s", line)


def _validation_settings(config):
    return {
        "validation_data": config.validation_data,
        "validation_split": config.validation_split,
        "validation_max_queries": config.validation_max_queries,
    }


def validation_collection(config):
    """`(corpus, queries, qrels)` of `validation_data` (at most `validation_max_queries` queries), or None."""
    if config.validation_data is None:
        return None
    from gtr_keras.beir.dataset import load_dataset

    corpus, queries, qrels, report = load_dataset(config.validation_data, config.validation_split)
    if not report.ok:
        logger.warning("warning: validation data: %s", report)
    queries = dict(itertools.islice(queries.items(), config.validation_max_queries))
    qrels = {qid: qrels[qid] for qid in queries}
    if not any(grade >= 1 for judgements in qrels.values() for grade in judgements.values()):
        raise DataError(
            f"{config.validation_data}: no judged query of split {config.validation_split!r} has a "
            f"relevant document (the validation_data setting)"
        )
    return corpus, queries, qrels


def collection_sha256(collection):
    """SHA-256 (hex) of a validation collection's content: document ids and texts, queries, judgements."""
    corpus, queries, qrels = collection
    judgements = [f"{q}\t{d}\t{grade}" for q in sorted(qrels) for d, grade in sorted(qrels[q].items())]
    return strings_sha256(
        [*corpus.ids, *corpus.joined(), *itertools.chain.from_iterable(sorted(queries.items())), *judgements]
    )


def best_so_far(config, sha256):
    """The NDCG@10 of `output_dir/best_model` when kept with the same validation settings on a collection
    of the same content (`sha256`, its `collection_sha256`), else None (the next validation replaces it)."""
    path = os.path.join(config.output_dir, BEST_MODEL, BEST_MODEL_RECORD)
    if not config.keep_best or not fs.exists(path):
        return None
    record = read_json_object(path, f"delete {os.path.dirname(path)} to start the best model over")
    same = json.dumps(_validation_settings(config), default=os.fspath) == json.dumps(
        {key: record.get(key) for key in _validation_settings(config)}, default=os.fspath
    )
    return record.get("ndcg@10") if same and record.get("validation_sha256") == sha256 else None


class Progress(keras.callbacks.ProgbarLogger):
    """Keras' progress bar, listed first so that its line ends before validation prints."""
