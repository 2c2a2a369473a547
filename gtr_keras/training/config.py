"""`TrainConfig`, the settings of a training run, read from YAML or JSON with flags on top; the
training precisions (dtype policies) and the distribution strategies.
"""

import dataclasses
import inspect
import math
import os
import re
from typing import Any, ClassVar, Self

import tensorflow as tf
import yaml

from gtr_keras.errors import UserError
from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.models.gtr.presets import PRESETS
from gtr_keras.training.data import TrainingData
from gtr_keras.training.distributed import multi_worker_strategy
from gtr_keras.training.losses import DEFAULT_TEMPERATURE
from gtr_keras.utils import files as fs
from gtr_keras.utils.dimensions import check_dimensions

PRECISIONS = {"float32": None, "bfloat16": "mixed_bfloat16"}
STRATEGIES = ("default", "mirrored", "tpu", "multi-worker")
_INTEGER_SETTINGS = {
    "steps": 1,
    "batch_size": 1,
    "checkpoint_every": 1,
    "keep_checkpoints": 1,
    "seed": 0,
    "grad_cache_chunk_size": 1,
    "sentencepiece_vocabulary_size": 1,
    "steps_per_execution": 1,
    "log_every": 1,
    "validate_every": 1,
    "validation_max_queries": 1,
    "worker_timeout": 1,
}
_OPTIONAL_SETTINGS = (
    "grad_cache_chunk_size",
    "sentencepiece_vocabulary_size",
    "steps_per_execution",
    "validate_every",
    "validation_max_queries",
)
_VALIDATION_SETTINGS = ("validate_every", "validation_max_queries", "keep_best")
TPU_STEPS_PER_EXECUTION = 100


def dtype_policy(precision):
    """The Keras dtype policy for a training precision.

    Args:
        precision: `"float32"` or `"bfloat16"` (Keras `"mixed_bfloat16"`:
            bfloat16 compute, float32 weights). `"float16"` is refused: T5's
            activations overflow float16's range.

    Returns:
        A dtype policy name, or `None` for float32.

    Raises:
        UserError: another precision.

    Example:
    >>> dtype_policy("bfloat16")
    'mixed_bfloat16'
    """
    if precision == "float16":
        raise UserError(
            "precision 'float16' is not supported: T5 activations overflow float16 (max 65504) and the loss "
            "becomes inf/NaN. Use 'bfloat16' (same range as float32) or 'float32'."
        )
    if precision not in PRECISIONS:
        raise UserError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    return PRECISIONS[precision]


@dataclasses.dataclass
class TrainConfig:
    """Settings of a `gtr-keras train` run (the YAML/JSON config file, `data` nested).

    Args:
        init: a gtr-keras model directory to fine-tune, or a preset name
            (`gtr-tiny`, `gtr-base`, ...) to train from random weights.
        data: a `TrainingData`, or a dict of its arguments.
        model: `GTRBackbone` arguments (or `embedding_dim`) replacing the preset's when `init` is
            a preset (e.g. `{"num_layers": 2, "embedding_dim": 128}`).
        output_dir: where checkpoints (`checkpoints/`), TensorBoard logs
            (`logs/`), the config (`train_config.json`) and the final model
            directory (`model/`) go. Rerunning with the same `output_dir`
            resumes from the latest checkpoint.
        tokenizer: a SentencePiece model file. By default the model
            directory's; with a preset, one is trained on the training texts
            (and kept as `output_dir/spiece.model`).
        sentencepiece_vocabulary_size: pieces of a trained SentencePiece
            model (default: the preset's vocabulary size minus T5's 100
            sentinel ids).
        sentencepiece_case_folding: train the SentencePiece model with NFKC
            and Unicode case folding (`nmt_nfkc_cf`), so that the model sees
            "LIFT", "Lift" and "lift" as the same pieces; the normalisation is
            part of the SentencePiece model, so every tokenizer of it (in the
            graph, in exports, Hugging Face's) folds case alike.
        steps: optimizer steps.
        batch_size: global batch size (queries per step, over all replicas).
        learning_rate: initial Adafactor learning rate, decayed linearly to 0.
        checkpoint_every: steps between checkpoints (also the length of a
            Keras epoch, or its greatest common divisor with `validate_every`).
        keep_checkpoints: checkpoints kept on disk.
        precision: `"float32"` or `"bfloat16"` (`"float16"` is refused).
        grad_cache_chunk_size: examples per GradCache chunk on each replica
            (`None`: no GradCache).
        strategy: `"default"` (one device), `"mirrored"` (all local GPUs),
            `"tpu"` (batches padded to the token budgets, for static shapes)
            or `"multi-worker"` (every device of several processes, each
            started with its own `TF_CONFIG`; `distributed`). Every strategy
            but the default reads its input with one pipeline per worker or
            TPU host, each keeping its replicas' rows of the same global
            batches (`distributed.distributed_batches`).
            JSONL, MS MARCO and BEIR sources are read by Python on the host
            (`tf.data.Dataset.from_generator`), which a TPU Node's remote
            host cannot run: there, write TFRecords with `write_tfrecord`.
        tpu: TPU address for `TPUClusterResolver` (`"local"` on a TPU VM).
        worker_timeout: with `multi-worker`, seconds a worker waits for the
            others to start, and for a silent one before the run ends naming
            it (a worker that dies ends the others at once).
        seed: seed of initialisation, shuffling and negative sampling.
        temperature: softmax temperature (0.01).
        mask_false_negatives: mask in-batch candidates that share the
            positive's document id.
        matryoshka_dims: prefixes N of the embeddings trained besides D with the same loss (Matryoshka
            representation learning), recorded in the saved model; None: GTR's loss alone.
        deterministic: enable TensorFlow op determinism (needed for
            bit-for-bit resumes).
        verbose: Keras `fit` verbosity (1: progress bar, 2: a line per
            checkpoint interval, 0: silent; validation lines unless 0).
        steps_per_execution: training steps the device runs per call from
            Python (Keras `compile(steps_per_execution=...)`, a loop on the
            device): the host reads metrics, writes TensorBoard points and
            checks for the end of the run only between calls. It must divide
            `checkpoint_every` (and `validate_every`). Default (`None`): 1
            with the `default` and `mirrored` strategies; with `tpu`, the
            largest divisor of `checkpoint_every` (and `validate_every`) up to
            100, so 100 for the usual multiples of 100. The weights are those
            of any other setting.
        log_every: steps between TensorBoard points in `output_dir/logs`,
            plotted against the global step: `train/loss` and
            `train/accuracy` (the in-batch top-1 accuracy), each the mean over
            the steps since the previous point (or the start of the checkpoint
            interval), and `train/learning_rate`. A point is written when an
            execution reaches a multiple of `log_every` (exactly there when
            `steps_per_execution` divides it), from the values Keras already
            fetches between executions, on a background thread.
        validation_data: a BEIR directory to validate on during training
            (read with `gtr_keras.beir.dataset.load_dataset`): NDCG@10 and
            Recall@100 (`gtr_keras.beir.evaluation.evaluate_run`) of exact search
            over its whole corpus with the weights being trained, written to
            TensorBoard (`val/ndcg@10`, `val/recall@100`) and printed. Each
            validation encodes the corpus and queries outside the training
            step (with `tpu`, with a copy of the weights on the host CPU), so
            use a small collection (thousands of documents, hundreds of
            queries) or cap the queries with `validation_max_queries`.
            Default: no validation.
        validation_split: the qrels split of `validation_data` (`"dev"`).
        validate_every: steps between validations (default: at each
            checkpoint); the last step is always validated. Validation runs
            between Keras epochs, whose length becomes the greatest common
            divisor of `checkpoint_every` and `validate_every`.
        validation_max_queries: validate on the first N judged queries of the
            split (default: all).
        keep_best: keep the model of the best validation NDCG@10 so far as a
            model directory `output_dir/best_model` (like `output_dir/model`,
            with `validation.json`: its step and metrics), replaced when a
            later validation does better. Needs `validation_data`.

    Resuming: `train` records the settings and fingerprints of the inputs in
    `output_dir/train_config.json` and refuses to resume with any that change
    the trained weights: every setting except those in `NOT_COMPARED` (where
    files go, how often checkpoints are saved and kept, how the same
    arithmetic is spread over devices, device loops (`steps_per_execution`),
    GradCache chunks or nondeterministic kernels, which changes the weights
    by rounding only, and what is logged and validated), and by content
    rather than path the initial model, the tokenizer file and the training
    data files.

    Raises:
        UserError: a setting of the wrong type or out of range.

    Example:
    >>> config = TrainConfig(init="gtr-base", data={"source": "triples.tsv"}, output_dir="runs/gtr")
    >>> config.data.num_negatives
    1
    """

    init: str
    data: TrainingData
    output_dir: str
    model: dict = dataclasses.field(default_factory=dict)
    tokenizer: str | None = None
    sentencepiece_vocabulary_size: int | None = None
    sentencepiece_case_folding: bool = False
    steps: int = 1000
    batch_size: int = 128
    learning_rate: float = 1e-3
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3
    precision: str = "float32"
    grad_cache_chunk_size: int | None = None
    strategy: str = "default"
    tpu: str | None = None
    worker_timeout: int = 120
    seed: int = 0
    temperature: float = DEFAULT_TEMPERATURE
    mask_false_negatives: bool = True
    matryoshka_dims: list[int] | None = None
    deterministic: bool = True
    verbose: int = 1
    steps_per_execution: int | None = None
    log_every: int = 100
    validation_data: str | None = None
    validation_split: str = "dev"
    validate_every: int | None = None
    validation_max_queries: int | None = None
    keep_best: bool = False

    data_class: ClassVar[type] = TrainingData
    flags: ClassVar[dict] = {"init": "--init", "output_dir": "--output-dir", "data.source": "--data"}

    def __post_init__(self):
        if isinstance(self.data, dict):
            try:
                self.data = self.data_class(**self.data)
            except UserError as error:
                raise UserError(f"data.{error}") from None
        dtype_policy(self.precision)
        if self.strategy not in STRATEGIES:
            raise UserError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        for name, minimum in _INTEGER_SETTINGS.items():
            value = getattr(self, name)
            if value is None and name in _OPTIONAL_SETTINGS:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise UserError(f"{name} must be an integer of at least {minimum}, got {value!r}")
        for name in ("learning_rate", "temperature"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"{name} must be a number, got {value!r}")
        if self.learning_rate < 0:
            raise UserError(f"learning_rate must not be negative, got {self.learning_rate}")
        if not self.temperature > 0:
            raise UserError(f"temperature must be positive, got {self.temperature}")
        if self.matryoshka_dims is not None:
            if not isinstance(self.matryoshka_dims, list) or not self.matryoshka_dims:
                raise UserError(f"matryoshka_dims must be a list of dimensions, got {self.matryoshka_dims!r}")
            self.matryoshka_dims = sorted({check_dimensions(n, None, "matryoshka_dims") for n in self.matryoshka_dims})
        if self.model:
            if self.init not in PRESETS:
                raise UserError(f"model settings {sorted(self.model)} need a preset `init`, got {self.init!r}")
            known = {*inspect.signature(GTRBackbone).parameters, "embedding_dim"}
            unknown = sorted(set(self.model) - known)
            if unknown:
                raise UserError(f"unknown model setting(s) {', '.join(unknown)}")
        self._check_loop_settings()
        self._check_tokenizer_settings()

    def _check_tokenizer_settings(self):
        if self.tokenizer is None and self.init in PRESETS:
            return
        uses = f"the tokenizer {self.tokenizer}" if self.tokenizer else f"the tokenizer of {self.init}"
        for name in ("sentencepiece_case_folding", "sentencepiece_vocabulary_size"):
            if getattr(self, name) not in (None, False):
                raise UserError(
                    f"{name} applies only to the SentencePiece model trained for a preset `init` "
                    f"without a `tokenizer`; this run uses {uses}"
                )

    def _check_loop_settings(self):
        for name in ("keep_best", "sentencepiece_case_folding"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.validation_split, str) or not self.validation_split:
            raise UserError(f"validation_split must be a qrels split name, got {self.validation_split!r}")
        if self.validation_data is None:
            named = [name for name in _VALIDATION_SETTINGS if getattr(self, name) not in (None, False)]
            if named:
                raise UserError(f"{named[0]} needs validation_data (a BEIR directory)")
        elif not isinstance(self.validation_data, (str, os.PathLike)):
            raise UserError(f"validation_data must be a BEIR directory, got {self.validation_data!r}")
        if self.steps_per_execution is not None and self.epoch_length() % self.steps_per_execution:
            also = f" and validate_every {self.validate_every}" if self.validate_every else ""
            raise UserError(
                f"steps_per_execution {self.steps_per_execution} must divide checkpoint_every {self.checkpoint_every}"
                + also
            )

    def epoch_length(self) -> int:
        """Steps of a Keras epoch of `train`: `checkpoint_every`, or its gcd with `validate_every`.

        Example:
        >>> TrainConfig("gtr-tiny", {"source": "t.jsonl"}, "out", checkpoint_every=1000).epoch_length()
        1000
        """
        if self.validate_every is None:
            return self.checkpoint_every
        return math.gcd(self.checkpoint_every, self.validate_every)

    def resolved_steps_per_execution(self) -> int:
        """`steps_per_execution`, or its default: 1, or with `tpu` the largest divisor of
        `epoch_length()` up to 100.

        Example:
        >>> TrainConfig("gtr-tiny", {"source": "t.jsonl"}, "out", strategy="tpu", checkpoint_every=250
        ...             ).resolved_steps_per_execution()
        50
        """
        if self.steps_per_execution is not None:
            return self.steps_per_execution
        if self.strategy != "tpu":
            return 1
        length = self.epoch_length()
        return max(k for k in range(1, min(length, TPU_STEPS_PER_EXECUTION) + 1) if length % k == 0)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str | os.PathLike[str] = "config") -> Self:
        """Builds a config from plain values, naming `source` and the key in errors.

        Raises:
            UserError: an unknown, missing or bad setting; the message starts
                with `source`.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        data_fields = {f.name for f in dataclasses.fields(cls.data_class)}
        unknown = sorted(set(values) - fields)
        unknown += sorted(f"data.{key}" for key in set(values.get("data") or {}) - data_fields)
        if unknown:
            raise UserError(f"{source}: unknown setting(s) {', '.join(unknown)}")
        for name, flag in cls.flags.items():
            group, _, key = name.rpartition(".")
            holder = (values.get(group) or {}) if group else values
            if holder.get(key) is None:
                raise UserError(f"{source}: missing setting `{name}` ({flag})")
        try:
            return cls(**values)
        except (TypeError, ValueError) as error:
            raise UserError(f"{source}: {error}") from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but `1e-3` is a float (YAML 1.2 and JSON) rather than a string (YAML 1.1)."""


ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+.0123456789")
)


def load_config(
    path: str | os.PathLike[str] | None,
    overrides: dict[str, Any] | None = None,
    config_class: type["TrainConfig"] | None = None,
) -> "TrainConfig":
    """Reads a YAML (or JSON) training config, with `overrides` on top.

    Args:
        path: the config file, or `None` to build from `overrides` only.
        overrides: a dict of settings; `"data.<name>"` keys set data settings.
        config_class: `TrainConfig` (default) or a subclass (`DistillConfig`).

    Returns:
        A `config_class`.

    Raises:
        UserError: an unreadable file or a bad setting, naming the file.

    Example:
    >>> config = load_config("train.yaml", {"steps": 20, "data.train_fraction": 0.1})  # doctest: +SKIP
    """
    values: dict[str, Any] = {}
    if path is not None:
        with fs.open(path, "r") as f:
            try:
                values = yaml.load(f, Loader=ConfigLoader) or {}
            except yaml.YAMLError as error:
                raise UserError(f"{path}: not valid YAML/JSON ({error})") from None
        if not isinstance(values, dict):
            raise UserError(f"{path}: expected a mapping of settings, got {type(values).__name__}")
    values = {**values, "data": dict(values.get("data") or {})}
    for key, value in (overrides or {}).items():
        if key.startswith("data."):
            values["data"][key[len("data.") :]] = value
        else:
            values[key] = value
    return (config_class or TrainConfig).from_dict(values, source=path or "training settings")


def make_strategy(name, tpu=None, cluster=None, worker_timeout=None):
    """The `tf.distribute` strategy for `TrainConfig.strategy` (`"multi-worker"` needs the `cluster` of
    `distributed.Cluster.from_environment` and `TrainConfig.worker_timeout`).

    Example:
    >>> make_strategy("default").num_replicas_in_sync
    1
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if name == "multi-worker":
        return multi_worker_strategy(cluster, worker_timeout)
    raise UserError(f"strategy must be one of {STRATEGIES}, got {name!r}")
