"""The package is typed (PEP 561): `py.typed` ships in the wheel, the top-level names' signatures are annotated
and resolve at run time, a type checker sees the lazy exports, and mypy reads every public module."""

import ast
import importlib.resources
import inspect
import os
import subprocess
import sys
import tomllib
import typing

from conftest import REPO

import gtr_keras
from gtr_keras.retrieval.index_types import Hit

with open(os.path.join(REPO, "pyproject.toml"), "rb") as _f:
    PYPROJECT = tomllib.load(_f)


def test_index_search_is_typed_in_a_fresh_process_without_tensorflow():
    script = (
        "import sys, typing, gtr_keras\n"
        "hints = typing.get_type_hints(gtr_keras.Index.search)\n"
        "print(sorted(hints), hints['return'], hints['k'].__name__)\n"
        "assert not {'tensorflow', 'keras'} & set(sys.modules), sorted({'tensorflow', 'keras'} & set(sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    names = "['filter', 'fusion', 'k', 'queries', 'rerank', 'rerank_depth', 'retriever', 'return']"
    assert result.stdout.strip() == f"{names} list[list[gtr_keras.retrieval.index_types.Hit]] int"


def _overrides_a_dependency(cls, attribute):
    """Whether `attribute` of `cls` overrides a method of a base class of Keras or keras-hub (`call`, `build`,
    `get_config`, ...), which keeps Keras' own style: keras-hub's classes annotate none of them."""
    return any(attribute in vars(base) for base in cls.__mro__[1:] if not base.__module__.startswith("gtr_keras"))


def _public_callables():
    """`(name, callable)` of every top-level name that is a function, and of every public method of those that
    are classes (but the errors', Python's own, and Keras' hooks), with `Index`'s base's."""
    for name in gtr_keras.__all__:
        value = getattr(gtr_keras, name)
        if inspect.isfunction(value):
            yield name, value
        elif inspect.isclass(value) and not issubclass(value, Exception):
            for attribute, member in vars(value).items():
                function = member.__func__ if isinstance(member, classmethod | staticmethod) else member
                public = attribute == "__init__" or not attribute.startswith("_")
                if inspect.isfunction(function) and public and not _overrides_a_dependency(value, attribute):
                    yield f"{name}.{attribute}", function
    for attribute in ("get", "check", "close", "__contains__", "__enter__"):
        yield f"Index.{attribute}", getattr(gtr_keras.Index, attribute)


def test_every_top_level_function_and_the_index_s_methods_are_annotated_and_resolve():
    unannotated = []
    for name, function in _public_callables():
        hints = typing.get_type_hints(function)  # a name that does not resolve raises here
        parameters = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
        missing = [p for p in parameters if p not in hints]
        if missing or ("return" not in hints and function.__name__ != "__init__" and name.startswith("Index")):
            unannotated.append((name, missing))
    assert unannotated == []
    assert typing.get_type_hints(gtr_keras.Index.get)["return"] == list[gtr_keras.retrieval.Document | None]
    assert typing.get_type_hints(Hit) == {
        "id": str,
        "score": float,
        "title": str,
        "text": str,
        "passage": dict[str, int],
    }
    assert Hit.__required_keys__ == {"id", "score"}  # title and text where the index stores documents


def test_py_typed_is_in_the_package_and_its_package_data():
    assert importlib.resources.files("gtr_keras").joinpath("py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["gtr_keras"]


def _type_checking_names(path):
    """The names the `if TYPE_CHECKING:` block of `path` imports, each with its module."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    [block] = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    return {(alias.asname, node.module) for node in block.body for alias in node.names if alias.asname == alias.name}


def test_a_type_checker_sees_every_top_level_name_from_the_module_that_exports_it():
    from test_architecture import _exports

    exports = _exports(os.path.join(REPO, "gtr_keras", "__init__.py"))
    assert _type_checking_names(os.path.join(REPO, "gtr_keras", "__init__.py")) == set(exports.items())


def test_mypy_reads_the_module_of_every_public_name_and_ci_runs_it():
    from test_architecture import _exports

    exports = _exports(os.path.join(REPO, "gtr_keras", "__init__.py"))
    files = set(PYPROJECT["tool"]["mypy"]["files"])
    modules = {module.replace(".", "/") + ".py" for module in exports.values()}
    assert modules | {"gtr_keras/__init__.py", "gtr_keras/retrieval/index_handle.py"} <= files
    for package in sorted(os.listdir(os.path.join(REPO, "gtr_keras"))):  # and of every subpackage's public name
        init = os.path.join(REPO, "gtr_keras", package, "__init__.py")
        if os.path.isfile(init):
            defining = {module for module in (_exports(init) or {}).values() if module is not None}
            assert {module.replace(".", "/") + ".py" for module in defining} <= files, package
    assert all(os.path.isfile(os.path.join(REPO, path)) for path in files)
    assert "mypy" in PYPROJECT["project"]["optional-dependencies"]["test"]
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        assert "\nstep python -m mypy" in f.read()
