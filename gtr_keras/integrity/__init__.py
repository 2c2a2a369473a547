"""`gtr-keras check`: every directory gtr-keras writes, verified file by file, one checker per kind:
`directory_checker` (what kind a path is, and its checker), `index_checker` (an index directory with every
segment, its documents and BM25 side; a search index), `model_checker` (a model directory), `export_checker`
(ONNX, OpenVINO, LiteRT, SavedModel exports and export roots), and `check_report` (what they found).

Public names: `check_directory` (a `CheckReport` of any directory gtr-keras writes: `ok`, `problems`, each
naming a file, `summary()`, what `gtr-keras check` prints).
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "check_directory": "gtr_keras.integrity.directory_checker",
    },
)
