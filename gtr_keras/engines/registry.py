"""`open_engine`: the `Engine` of a target's collection, its engine's module imported when first asked for, so
that a missing extra is one line naming the pip command to run.

Example:
>>> engine = open_engine("qdrant:/data/qdrant", "papers")
>>> engine.info()
"""

import importlib

from gtr_keras.engines.engine import Engine
from gtr_keras.engines.targets import Target, parse_target
from gtr_keras.errors import UserError

# engine: (module, class, the package it needs, the extra that installs it).
ENGINE_CLASSES = {
    "qdrant": ("gtr_keras.engines.qdrant_engine", "QdrantEngine", "qdrant-client", "qdrant"),
    "milvus": ("gtr_keras.engines.milvus_engine", "MilvusEngine", "pymilvus", "milvus"),
    "vertex-ai": ("gtr_keras.engines.vertex_engine", "VertexEngine", None, None),
}


def engine_class(engine: str) -> type[Engine]:
    """The `Engine` class of `engine` (one of `targets.ENGINES`), imported now.

    Raises:
        UserError: its package is not installed, naming the pip line that installs it.
    """
    module_name, class_name, package, extra = ENGINE_CLASSES[engine]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if package is None or error.name == module_name:
            raise UserError(f"{engine}: this gtr-keras has no {engine} engine ({module_name} is missing)") from None
        raise UserError(f"{engine} needs {package}: pip install 'gtr-keras[{extra}]'") from None
    return getattr(module, class_name)


def open_engine(target: str | Target, collection: str, timeout: float = 10.0) -> Engine:
    """The `Engine` of `collection` at `target` (a target string, `parse_target`'s, or a `Target`).

    Args:
        target: `qdrant:PATH`, `qdrant+http://HOST:PORT`, `milvus:PATH.db`, `milvus+http://HOST:PORT` or
            `vertex-ai:DIR`.
        collection: the collection's name.
        timeout: seconds a request may wait (an unreachable host is a `UserError` after it).

    Raises:
        UserError: a target of none of those forms, an empty collection name, a missing extra (the pip line),
            an unreachable host.
    """
    target = parse_target(target) if isinstance(target, str) else target
    if not isinstance(collection, str) or not collection:
        raise UserError(f"{target.text}: a collection name is needed (--collection NAME)")
    return engine_class(target.engine)(target, collection, timeout=timeout)
