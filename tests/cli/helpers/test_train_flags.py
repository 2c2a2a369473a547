"""The `train` and `distill` flags: their stated defaults are the config classes', and they override `--config`."""

import dataclasses
import json
import re

from gtr_keras.cli.helpers.train_flags import DISTILL_FLAGS, TRAIN_FLAGS
from gtr_keras.cli.parser import build_parser


def test_train_and_distill_flag_defaults_in_help_are_the_config_defaults():
    from gtr_keras.distillation.distillation_config import DistillConfig
    from gtr_keras.training.config import TrainConfig

    checked = 0
    for flags, config_class in ((TRAIN_FLAGS, TrainConfig), (DISTILL_FLAGS, DistillConfig)):
        checked += _check_stated_defaults(flags, config_class)
    assert checked >= 30


def _check_stated_defaults(flags, config_class):
    defaults = {f.name: f.default for f in dataclasses.fields(config_class)}
    defaults.update({f"data.{f.name}": f.default for f in dataclasses.fields(config_class.data_class)})
    checked = 0
    for flag, key, _, _, text in flags:
        stated = re.search(r"\(default: ([^)]*)\)", text)
        if "required" in text:
            continue
        assert stated, flag
        value = stated.group(1).split(",")[0].strip()
        default = defaults[key]
        if default is None or isinstance(default, str) and default not in ("float32", "default", "auto", "train"):
            continue
        assert value == str(default), f"{flag}: help says {value}, {config_class.__name__} has {default!r}"
        checked += 1
    return checked


def test_train_flags_override_the_config_file(tmp_path):
    from gtr_keras.cli.helpers.train_runs import config_from_args

    (tmp_path / "t.tsv").write_text("q\tp\tn\n")
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"init": "gtr-base", "output_dir": "out", "data": {"source": "t.tsv"}}))
    parser = build_parser()
    args = parser.parse_args(
        [
            "train",
            "--config",
            str(path),
            "--steps",
            "9",
            "--num-negatives",
            "0",
            "--precision",
            "bfloat16",
            "--no-mask-false-negatives",
        ]
    )
    config = config_from_args(args)
    assert (config.init, config.steps, config.precision) == ("gtr-base", 9, "bfloat16")
    assert config.data.num_negatives == 0
    assert config.data.source == "t.tsv" and config.mask_false_negatives is False
    data = str(tmp_path / "t.tsv")
    config = config_from_args(parser.parse_args(["train", "--init", "gtr-tiny", "--output-dir", "o", "--data", data]))
    assert (config.init, config.output_dir, config.data.source) == ("gtr-tiny", "o", data)
    assert config.batch_size == 128
