"""GTR's subclassed models beside functional keras-hub models (BERT, the rerankers' backbones) in one process,
in either order: Keras rewrites keras-hub's shared classes as it always does, GTR's keep their method order."""

import json
import os
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest
from conftest import FIXTURES, REPO

from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder


def _bert_backbone():
    return keras_hub.models.BertBackbone(
        vocabulary_size=7, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=8
    )


def test_gtr_models_built_after_a_functional_keras_hub_model_stay_subclassed():
    _bert_backbone()
    assert keras_hub.models.Backbone.__bases__ != (keras.Model,)  # Keras' rewrite, which GTR must outlive
    for cls in (GTRBackbone, GTRTextEmbedder):
        model = cls.__mro__.index(keras.Model)
        assert cls.__mro__[model:] == keras.Model.__mro__, cls
        assert not any(base.__module__.startswith("keras.") for base in cls.__mro__[:model]), cls
    embedder = keras_hub.models.TextEmbedder.from_preset(f"{FIXTURES}/tiny-gtr-preset-0.1")
    assert type(embedder) is GTRTextEmbedder and type(embedder.backbone) is GTRBackbone
    assert type(keras.models.clone_model(embedder.backbone)) is GTRBackbone
    assert embedder.encode_queries(["lift on a wing"]).shape == (1, embedder.embedding_dim)


SCRIPT = """
import json, sys
import numpy as np
import keras
import keras_hub
import gtr_keras

def bert():
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cat", "dog"])
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(vocabulary_size=7, num_layers=1, num_heads=2, hidden_dim=8,
                                             intermediate_dim=16, max_sequence_length=8)
    embedder = keras_hub.models.BertTextEmbedder(
        backbone, keras_hub.models.BertTextEmbedderPreprocessor(tokenizer, sequence_length=8))
    classifier = keras_hub.models.BertTextClassifier(
        backbone, 2, keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=8))
    return [embedder.predict(["cat dog"], verbose=0).tolist(), classifier.predict(["dog"], verbose=0).tolist()]

def gtr():
    preset = keras_hub.models.TextEmbedder.from_preset(sys.argv[2])
    assert type(preset).__name__ == "GTRTextEmbedder", type(preset)
    return gtr_keras.load("gtr_small_distilled_en").encode_queries(["lift on a wing"]).tolist()

first, second = (bert, gtr) if sys.argv[1] == "bert-first" else (gtr, bert)
results = {first.__name__: first(), second.__name__: second()}
assert "Functional" not in [cls.__name__ for cls in gtr_keras.GTRTextEmbedder.__mro__]
print(json.dumps(results))
"""


def run(order):
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, order, f"{FIXTURES}/tiny-gtr-preset-0.1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.large
@pytest.mark.slow
def test_gtr_and_functional_keras_hub_models_share_a_process_in_either_order():
    bert_first, gtr_first = run("bert-first"), run("gtr-first")
    np.testing.assert_array_equal(np.array(bert_first["gtr"]), np.array(gtr_first["gtr"]))
    for a, b in zip(bert_first["bert"], gtr_first["bert"]):
        np.testing.assert_allclose(np.array(a), np.array(b), atol=1e-6)
