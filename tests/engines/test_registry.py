"""`open_engine`: one line for a bad target, a missing collection name or a missing extra (the pip line)."""

import builtins

import pytest

from gtr_keras.engines.qdrant_engine import QdrantEngine
from gtr_keras.engines.registry import ENGINE_CLASSES, engine_class, open_engine
from gtr_keras.engines.targets import ENGINES
from gtr_keras.errors import UserError


def test_every_engine_has_its_class_and_a_target_opens_its_collection(tmp_path):
    assert set(ENGINE_CLASSES) == set(ENGINES)
    assert engine_class("qdrant") is QdrantEngine
    assert [engine_class(name).__name__ for name in ("milvus", "vertex-ai")] == ["MilvusEngine", "VertexEngine"]
    engine = open_engine(f"qdrant:{tmp_path / 'q'}", "docs", timeout=3)
    try:
        assert isinstance(engine, QdrantEngine) and engine.collection == "docs" and engine.timeout == 3
        assert engine.info() is None and engine.ids() == []
    finally:
        engine.close()


@pytest.mark.parametrize(
    "target, collection, message",
    [
        ("redis://localhost:6379", "c", "^target 'redis://localhost:6379': expected qdrant:PATH"),
        ("qdrant:", "c", "no location after qdrant:"),
        ("qdrant:/tmp/q", "", "^qdrant:/tmp/q: a collection name is needed"),
    ],
)
def test_a_bad_target_or_collection_is_one_line(target, collection, message):
    with pytest.raises(UserError, match=message):
        open_engine(target, collection)


def test_a_missing_package_is_the_pip_line_to_run(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def without_qdrant(name, *args, **kwargs):
        if name == "qdrant_client" or name.startswith("qdrant_client."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_qdrant)
    monkeypatch.delitem(__import__("sys").modules, "gtr_keras.engines.qdrant_engine")
    with pytest.raises(UserError, match=r"^qdrant needs qdrant-client: pip install 'gtr-keras\[qdrant\]'$"):
        open_engine(f"qdrant:{tmp_path / 'q'}", "docs")
