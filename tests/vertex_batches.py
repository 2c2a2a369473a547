"""What Vertex AI Vector Search holds after a `vertex-ai:DIR` target's batch folders are applied as Vertex
applies them (docs/past-one-machine.md): in the lexical order of the folder names, each folder's JSON lines
upserted, then the ids under its `delete/` removed."""

import json
import os

import numpy as np

from gtr_keras.engines.vertex_engine import RECORD


def batch_folders(root):
    """The batch folders under `root`, in the order Vertex applies them."""
    return sorted(name for name in os.listdir(root) if name != RECORD)


def replay(root):
    """`{id: float32 embedding}` of the datapoints Vertex holds once every batch folder under `root` is applied."""
    live = {}
    for name in batch_folders(root):
        folder = os.path.join(root, name)
        for file in sorted(f for f in os.listdir(folder) if f.endswith(".json")):
            with open(os.path.join(folder, file), encoding="utf-8") as f:
                for line in f:
                    point = json.loads(line)
                    live[point["id"]] = np.asarray(point["embedding"], np.float32)
        if os.path.isdir(os.path.join(folder, "delete")):
            for file in os.listdir(os.path.join(folder, "delete")):
                with open(os.path.join(folder, "delete", file), encoding="utf-8") as f:
                    for line in f.read().split("\n"):
                        if line:
                            live.pop(line, None)
    return live
