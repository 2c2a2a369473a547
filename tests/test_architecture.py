"""The package's layout: no import cycle (function-level imports count), each folder importing only the
layers beneath it (docs/architecture.md), and the parser importing no TensorFlow."""

import ast
import os
import subprocess
import sys

from conftest import REPO

PACKAGE = os.path.join(REPO, "gtr_keras")
# Each folder of the package may import the folders listed for it (and itself); `errors` is everyone's.
ALLOWED = {
    "utils": set(),
    "models": {"utils", "convert"},
    "convert": {"utils", "models"},
    "retrieval": {"utils", "models"},
    "training": {"utils", "models", "convert", "retrieval"},
    "serving": {"utils", "models", "retrieval"},
    "cli": {"utils", "models", "convert", "retrieval", "training", "serving"},
}


def module_names():
    names = {"gtr_keras_cli": os.path.join(REPO, "gtr_keras_cli.py")}
    for directory, _, file_names in os.walk(PACKAGE):
        for file_name in file_names:
            if file_name.endswith(".py"):
                path = os.path.join(directory, file_name)
                name = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".").removesuffix(".__init__")
                names[name] = path
    return names


def imports(modules):
    """`{module: {module it imports}}` over every import statement, at any depth of the code."""
    graph = {}
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                candidates = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for candidate in candidates:
                while candidate and candidate not in modules:
                    candidate = candidate.rpartition(".")[0]
                if candidate and candidate != name:
                    targets.add(candidate)
        graph[name] = targets
    return graph


def strongly_connected_components(graph):
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            components.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return components


def test_no_import_cycle():
    graph = imports(module_names())
    assert len(graph) > 30
    assert [c for c in strongly_connected_components(graph) if len(c) > 1] == []


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert sorted(sorted(c) for c in strongly_connected_components(graph) if len(c) > 1) == [["a", "b", "c"]]


def test_folders_import_only_the_layers_beneath_them():
    wrong = []
    for module, targets in imports(module_names()).items():
        parts = module.split(".")
        if parts[0] != "gtr_keras" or len(parts) < 3:
            continue
        for target in targets:
            folder = target.split(".")[1] if target.startswith("gtr_keras.") and target.count(".") >= 2 else None
            if folder and folder != parts[1] and folder not in ALLOWED[parts[1]]:
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_only_the_top_level_package_imports_in_its_init():
    for directory, _, file_names in os.walk(PACKAGE):
        if "__init__.py" in file_names and directory != PACKAGE:
            tree = ast.parse(open(os.path.join(directory, "__init__.py"), encoding="utf-8").read())
            assert not any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)), directory


def test_the_parser_answers_without_tensorflow_and_the_package_imports_quietly():
    script = (
        "import sys, gtr_keras_cli\n"
        "status = gtr_keras_cli.main(['encode', '--model', './no-such-dir', '--input', 'README.md', '--output', 'o.npy'])\n"
        "assert status == 2 and 'tensorflow' not in sys.modules, (status, 'tensorflow' in sys.modules)\n"
        "import gtr_keras\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == "gtr-keras encode: error: ./no-such-dir: no such model directory\n"


def test_the_top_level_modules_import_what_the_architecture_says():
    graph = imports(module_names())
    assert graph["gtr_keras.errors"] == set()
    assert graph["gtr_keras_cli"] <= {"gtr_keras.errors", "gtr_keras.utils", "gtr_keras.utils.files",
                                      "gtr_keras.models.gtr.model_directory", "gtr_keras.cli.commands"}
    assert graph["gtr_keras"] == {"gtr_keras.models.gtr.text_embedder"}  # the rest is imported on first use
