"""Inputs shared by the ONNX and OpenVINO export tests: the fixture's texts and token batches of several
shapes (padded rows included)."""

import json
import os

import numpy as np
from conftest import FIXTURES

# (batch, length) of the token batches: one token, short and long, one row and several.
SHAPES = ((1, 1), (1, 7), (3, 40), (8, 130), (2, 600))


def fixture_texts():
    with open(os.path.join(FIXTURES, "tiny-gtr-texts.json"), encoding="utf-8") as f:
        return json.load(f)


def token_batches(vocabulary_size, seed=0):
    """`[(token_ids, padding_mask)]` int32 of `SHAPES`, the first row of each padded past half its length."""
    rng = np.random.default_rng(seed)
    batches = []
    for batch, length in SHAPES:
        ids = rng.integers(3, vocabulary_size, (batch, length)).astype(np.int32)
        mask = np.ones_like(ids)
        ids[0, length // 2 + 1 :] = mask[0, length // 2 + 1 :] = 0
        batches.append((ids, mask))
    return batches
