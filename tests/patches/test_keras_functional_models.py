"""GTR and functional keras-hub models (a BERT text embedder and classifier) in one process, in either order,
each giving what it gives alone, and keras-hub's shared classes left as they are."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO

SCRIPT = """
import json, sys
import numpy as np
import gtr_keras
import keras
import keras_hub

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
    return gtr_keras.load("gtr-small-distilled").encode_queries(["lift on a wing"]).tolist()

first, second = (bert, gtr) if sys.argv[1] == "bert-first" else (gtr, bert)
results = {first.__name__: first(), second.__name__: second()}
assert keras_hub.models.Backbone.__bases__ == (keras.Model,), keras_hub.models.Backbone.__bases__
print(json.dumps(results))
"""


def run(order):
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, order],
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
