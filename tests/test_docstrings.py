"""The examples in the class docstrings of the Keras-facing classes run as written."""

import doctest
import os

import keras_hub
import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_ST

import gtr_keras
from gtr_keras.distillation.distilled_dual_encoder import DistilledDualEncoder
from gtr_keras.models.gtr.encoder import Encoder
from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.models.gtr.gtr_tokenizer import GTRTokenizer
from gtr_keras.models.gtr.masked_mean_pooling import MaskedMeanPooling
from gtr_keras.models.gtr.t5_attention import T5Attention
from gtr_keras.models.gtr.t5_encoder_block import T5EncoderBlock
from gtr_keras.models.gtr.t5_feed_forward import T5FeedForward
from gtr_keras.models.model_files.model_source import ModelSource, resolve_model_source
from gtr_keras.models.subclassed_model import SubclassedModelType
from gtr_keras.training.dual_encoder import DualEncoder, make_optimizer


@pytest.mark.parametrize(
    "cls",
    [
        GTRBackbone,
        GTRTextEmbedder,
        GTRTextEmbedderPreprocessor,
        GTRTokenizer,
        Encoder,
        DualEncoder,
        DistilledDualEncoder,
        T5Attention,
        T5FeedForward,
        T5EncoderBlock,
        MaskedMeanPooling,
        ModelSource,
        SubclassedModelType,
    ],
)
def test_class_docstring_example_runs(cls, tiny_model_dir):
    globs = {
        "np": np,
        "tf": tf,
        "keras_hub": keras_hub,
        "gtr_keras": gtr_keras,
        "make_optimizer": make_optimizer,
        "spiece_model": os.path.join(TINY_ST, "spiece.model"),
        "model_dir": tiny_model_dir,
        cls.__name__: cls,
        "GTRTokenizer": GTRTokenizer,
        "os": os,
        "resolve_model_source": resolve_model_source,
    }
    tests = doctest.DocTestFinder(recurse=False).find(cls, globs=globs)
    assert tests and tests[0].examples, f"{cls.__name__} has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
