"""`when_imported`: hooks after a module's code, at once for one imported already, and `settled` hooks
only when no module of the package is half imported."""

import importlib
import sys

import pytest

from gtr_keras.utils import import_hooks
from gtr_keras.utils.import_hooks import when_imported


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package `hooked_pkg` with `a` (which imports `b`) and `b`, importable from `tmp_path`."""
    root = tmp_path / "hooked_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("import hooked_pkg.b\nDONE = True\n")
    (root / "b.py").write_text("DONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(import_hooks, "_PENDING", [])
    yield "hooked_pkg"
    for name in [name for name in sys.modules if name.startswith("hooked_pkg")]:
        del sys.modules[name]


def test_a_hook_runs_once_after_the_module_code(package):
    seen = []
    when_imported(f"{package}.b", lambda module: seen.append((module.__name__, module.DONE)))
    assert seen == []
    importlib.import_module(f"{package}.b")
    importlib.import_module(f"{package}.a")
    assert seen == [("hooked_pkg.b", True)]
    assert type(sys.modules["hooked_pkg.b"].__loader__).__name__ == "SourceFileLoader"


def test_a_hook_of_an_imported_module_runs_at_once(package):
    import hooked_pkg.b  # noqa: F401

    seen = []
    when_imported(f"{package}.b", lambda module: seen.append(module.__name__))
    assert seen == ["hooked_pkg.b"]


def test_a_settled_hook_waits_for_the_import_that_is_in_progress(package):
    seen = []

    def hook(module):
        seen.append(hasattr(sys.modules["hooked_pkg.a"], "DONE"))

    when_imported(f"{package}.b", hook, settled=f"{package}.")
    import hooked_pkg.a  # noqa: F401  (imports b half-way through its own code)

    assert seen == [True]
