"""The package's layout: no import cycle (function-level imports count), each folder importing only the
layers beneath it (docs/architecture.md), no module at the repository's root, and the parser importing no
TensorFlow."""

import ast
import json
import os
import subprocess
import sys
import warnings

import pytest
from conftest import REPO

PACKAGE = os.path.join(REPO, "gtr_keras")
# Each folder of the package may import the folders listed for it (and itself); `errors` is everyone's.
ALLOWED = {
    "utils": set(),
    "models": {"utils"},
    "convert": {"utils", "models"},
    "beir": {"utils"},
    "storage": {"utils", "beir"},
    "filters": {"utils", "beir", "storage"},
    "tuning": {"utils", "storage"},
    "lexical": {"utils", "models", "beir", "storage"},
    "engines": {"utils", "models", "beir", "storage", "filters", "lexical"},
    "retrieval": {"utils", "models", "beir", "storage", "filters", "tuning", "lexical", "engines"},
    "training": {"utils", "models", "convert", "beir", "retrieval"},
    "distillation": {"utils", "models", "convert", "beir", "storage", "retrieval", "training"},
    "exports": {"utils", "models", "storage", "filters", "lexical", "retrieval"},
    "integrity": {"utils", "models", "storage", "lexical", "exports"},
    "server": {"utils", "storage", "filters", "lexical", "engines", "retrieval"},
    "cli": {"utils", "models", "convert", "beir", "storage", "filters", "tuning", "lexical", "engines", "retrieval"}
    | {"training", "distillation", "exports", "integrity", "server"},
}
# Modules of a folder above that a folder may import too: integrity's checks of an index directory, which import
# only folders beneath retrieval (`Index.check`); the rest of integrity reads exports, which import retrieval.
ALLOWED_MODULES = {"retrieval": {"gtr_keras.integrity.check_report", "gtr_keras.integrity.index_checker"}}
# A folder holds at most this many modules, its `__init__.py` included; `cli/commands/` one a command, however many.
MAX_MODULES = 12
MAX_LINES = 600
COMMANDS_FOLDER = os.path.join("gtr_keras", "cli", "commands")


def module_names():
    names = {}
    for directory, _, file_names in os.walk(PACKAGE):
        for file_name in file_names:
            if file_name.endswith(".py"):
                path = os.path.join(directory, file_name)
                name = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".").removesuffix(".__init__")
                names[name] = path
    return names


def _type_checking_imports(tree):
    """The import statements of `tree` under `if TYPE_CHECKING:`, which only a type checker reads."""
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for statement in node.body
        for inner in ast.walk(statement)
    }


def imports(modules, trees=None, known=None):
    """`{module: {module it imports}}` over every import statement that runs, at any depth of the code (of
    `trees`' where given; not those under `if TYPE_CHECKING:`), resolved among the modules `known` (default:
    `modules`)."""
    graph, known = {}, known or modules
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        targets = set()
        tree = (trees or {}).get(name) or ast.parse(open(path, encoding="utf-8").read())
        typing_only = _type_checking_imports(tree)
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
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
                while candidate and candidate not in known:
                    candidate = candidate.rpartition(".")[0]
                # A module's own packages are imported before it: importing them back is no cycle.
                if candidate and candidate != name and not name.startswith(f"{candidate}."):
                    targets.add(candidate)
        graph[name] = targets
    return graph


def module_level_imports(module):
    """The modules of the package that `module` imports outside its functions (what importing it runs)."""
    modules = module_names()
    path = modules[module]
    tree = ast.parse(open(path, encoding="utf-8").read())
    top = ast.Module(
        body=[node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))], type_ignores=[]
    )
    return imports({module: path}, {module: top}, modules)[module]


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
            allowed = folder in ALLOWED[parts[1]] or target in ALLOWED_MODULES.get(parts[1], ())
            if folder and folder != parts[1] and not allowed:
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_the_modules_a_lower_folder_may_import_import_only_what_it_may():
    """A module of `ALLOWED_MODULES` imports only the folders that its importer may import (and the other
    modules of its exception), so that the exception cannot carry an import cycle between the folders."""
    graph = imports(module_names())
    wrong = []
    for folder, modules in ALLOWED_MODULES.items():
        for module in modules:
            for target in graph[module]:
                beneath = target.split(".")[1] in ALLOWED[folder] | {"errors"} or target in modules
                if target.startswith("gtr_keras.") and not beneath:
                    wrong.append(f"{module} -> {target}")
    assert wrong == []


DEPENDENCIES = ("keras", "keras_hub", "tensorflow")


def _root(target):
    """The name an assignment's target hangs from (`a` of `a.b.c = ...`, `a.b[0] = ...`), None for a plain name."""
    if not isinstance(target, (ast.Attribute, ast.Subscript)):
        return None
    while isinstance(target, (ast.Attribute, ast.Subscript)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _names(node):
    """The names of a name, or of a tuple or list of names; None for anything else."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Tuple | ast.List) and all(isinstance(element, ast.Name) for element in node.elts):
        return [element.id for element in node.elts]
    return None


def changes_of_dependencies(tree):
    """`[(line, code)]` of each assignment, `del`, `setattr` or `delattr` of an attribute of a name bound to
    keras, keras-hub or TensorFlow (a module or anything imported from one), or to a tuple, list or loop of
    such names (`for module in (task, backbone): module.f = ...`)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in DEPENDENCIES}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module.split(".")[0] in DEPENDENCIES:
            bound |= {alias.asname or alias.name for alias in node.names}
    holders = [(node.targets, node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)]
    holders += [([node.target], node.iter) for node in ast.walk(tree) if isinstance(node, (ast.For, ast.comprehension))]
    while True:
        more = {
            name
            for targets, value in holders
            if set(_names(value) or ()) & bound
            for target in targets
            for name in _names(target) or ()
        } - bound
        if not more:
            break
        bound |= more
    changes = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("setattr", "delattr") and node.args:
            targets = [ast.Attribute(value=node.args[0], attr="?")]
        else:
            continue
        if any(_root(target) in bound for target in targets):
            changes.append((node.lineno, ast.unparse(node)))
    return changes


def test_the_package_changes_nothing_of_keras_keras_hub_or_tensorflow():
    changes = {
        name: found
        for name, path in module_names().items()
        if (found := changes_of_dependencies(ast.parse(open(path, encoding="utf-8").read())))
    }
    assert changes == {}


@pytest.mark.parametrize(
    "code",
    [
        "from keras.src.models import model as keras_model\nkeras_model.inject_functional_model_class = f",
        "from keras_hub.src.models import task\nfor module in (task,):\n    module.get_preset_loader = f",
        "from keras_hub.src.models import backbone, task\n_CALLERS = (task, backbone)\n"
        "for module in _CALLERS:\n    setattr(module, 'get_preset_loader', f)",
        "import keras_hub\nkeras_hub.models.Backbone.__bases__ = (object,)",
        "import tensorflow as tf\ntf.io.gfile.exists = f",
    ],
)
def test_the_dependency_check_finds_a_replaced_function(code):
    assert len(changes_of_dependencies(ast.parse(code))) == 1


def test_the_dependency_check_leaves_the_package_own_objects_alone():
    code = (
        "import keras\nlayer = keras.layers.Dense(2)\nlayer.trainable = False\nself.projection = keras.layers.Dense(2)"
    )
    assert changes_of_dependencies(ast.parse(code)) == []


def test_importing_the_package_and_building_a_model_leaves_keras_and_keras_hub_functions_their_own():
    from keras.src.models import model
    from keras_hub.src.models import backbone, preprocessor, task
    from keras_hub.src.tokenizers import tokenizer
    from keras_hub.src.utils import preset_utils

    import gtr_keras

    gtr_keras.GTRTextEmbedder.from_preset("gtr-tiny")
    assert (model.inject_functional_model_class.__module__, model.inject_functional_model_class.__name__) == (
        "keras.src.models.model",
        "inject_functional_model_class",
    )
    assert preset_utils.get_preset_loader.__module__ == "keras_hub.src.utils.preset_utils"
    for module in (task, backbone, preprocessor, tokenizer):
        assert module.get_preset_loader is preset_utils.get_preset_loader, module.__name__


def test_no_folder_holds_more_than_twelve_modules():
    counts = {}
    for directory, _, file_names in os.walk(PACKAGE):
        modules = [name for name in file_names if name.endswith(".py")]
        if modules:
            counts[os.path.relpath(directory, REPO)] = len(modules)
    assert len(counts) > 10 and COMMANDS_FOLDER in counts
    assert {f: count for f, count in counts.items() if count > MAX_MODULES and f != COMMANDS_FOLDER} == {}


def test_no_module_is_longer_than_600_lines():
    lengths = {name: len(open(path, encoding="utf-8").readlines()) for name, path in module_names().items()}
    assert {name: length for name, length in lengths.items() if length > MAX_LINES} == {}


def _exports(path):
    """`{name: module}` of a package's public names, read from its `__init__.py` without importing it: its
    `__all__` where it sets one (a module's names, or `[]` for a namespace of internal names), else the
    `lazy_exports(__name__, {...})` call's; None for a module with neither."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if [getattr(t, "id", None) for t in targets] == ["__all__"]:
                return {element.value: None for element in node.value.elts}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports":
            return {key.value: value.value for key, value in zip(node.args[1].keys, node.args[1].values)}
    return None


def public_names(module):
    """The public names of `gtr_keras` or one of its subpackages or of `gtr_keras.errors` (docs/architecture.md,
    "Public names"), or None for a module that has none (an internal one)."""
    modules = module_names()
    path = modules.get(module)
    if path is None or not (module == "gtr_keras.errors" or path.endswith("__init__.py")):
        return None
    exports = _exports(path)
    return None if exports is None else set(exports)


def test_the_top_level_package_has_at_most_24_public_names_and_each_subpackage_exports_its_own():
    import gtr_keras

    assert len(gtr_keras.__all__) <= 24
    assert set(gtr_keras.__all__) == public_names("gtr_keras")
    for module, path in module_names().items():
        if path.endswith("__init__.py") and module != "gtr_keras":
            for name, target in (_exports(path) or {}).items():
                assert target.startswith(f"{module}."), f"{module}.{name} comes from {target}"


def test_the_public_names_are_at_most_60_and_each_is_defined_once():
    """Every `__all__` of the package, the top-level's included (issue 59): at most 60 names in all, and no name
    in two of them (`Index` is `gtr_keras.Index`, not also `gtr_keras.retrieval.Index`)."""
    lists = {
        module: sorted(names)
        for module, path in module_names().items()
        if (names := _exports(path) if path.endswith("__init__.py") or module == "gtr_keras.errors" else None)
    }
    every = [name for names in lists.values() for name in names]
    assert len(every) <= 60, {module: len(names) for module, names in lists.items()}
    twice = {name: [m for m, names in lists.items() if name in names] for name in every if every.count(name) > 1}
    assert twice == {}


def test_the_package_inits_import_only_what_gives_their_public_names():
    # The model family registers its presets, as keras-hub's families do; a package with public names imports
    # them on first use (`utils.lazy_exports`).
    family = [
        "from keras_hub.src.utils.preset_utils import register_presets",
        "from gtr_keras.models.gtr.gtr_backbone import GTRBackbone",
        "from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder",
        "from gtr_keras.models.gtr.presets import keras_hub_presets",
    ]
    for directory, _, file_names in os.walk(PACKAGE):
        if "__init__.py" in file_names and directory != PACKAGE:
            path = os.path.join(directory, "__init__.py")
            tree = ast.parse(open(path, encoding="utf-8").read())
            imported = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
            lazy = (
                ["from gtr_keras.utils.lazy_exports import lazy_exports"]
                if "lazy_exports(" in ast.unparse(tree)
                else []
            )
            if directory == os.path.join(PACKAGE, "models", "gtr"):
                assert imported == family, directory
            else:
                assert imported == lazy, directory


@pytest.mark.large
@pytest.mark.parametrize(
    "imports",
    [
        "import keras, gtr_keras",
        "import keras_hub, gtr_keras",
        "import gtr_keras, keras; import gtr_keras.models.gtr",
        "import gtr_keras, keras; gtr_keras.GTRBackbone",
        "import gtr_keras; gtr_keras.GTRTextEmbedder",
        "import gtr_keras; from gtr_keras.models.gtr.gtr_backbone import GTRBackbone",
    ],
)
def test_the_keras_classes_are_registered_once_keras_and_the_family_are_imported(imports):
    script = (
        f"{imports}\nimport keras\n"
        "assert keras.saving.get_registered_object('gtr_keras>GTRTextEmbedder') is not None\n"
        "assert keras.saving.get_registered_object('gtr_keras>GTRTokenizer') is not None\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_process_that_searches_a_local_index_loads_neither_keras_nor_tensorflow(tmp_path):
    """`gtr_keras.Index`, the one way to open an index, searches query vectors with numpy and ScaNN only."""
    import numpy as np

    from gtr_keras.retrieval.index_building import index_embeddings

    vectors = np.random.default_rng(0).standard_normal((30, 8)).astype(np.float32)
    vectors[0] = np.eye(1, 8) * 2
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(tmp_path / "e.npy", vectors)
    (tmp_path / "e.ids.txt").write_text("".join(f"d{i}\n" for i in range(30)))
    for kind in ("exact", "scann"):
        index_embeddings(str(tmp_path / "e.npy"), str(tmp_path / kind), kind=kind, bm25=False)
    script = (
        "import sys, numpy as np\nfrom gtr_keras import Index\n"
        f"for kind in ('exact', 'scann'):\n"
        f"    with Index.open({str(tmp_path)!r} + '/' + kind) as index:\n"
        "        assert index.search(np.eye(1, 8, dtype=np.float32), k=1)[0][0]['id'] == 'd0', kind\n"
        "assert not {'tensorflow', 'keras'} & set(sys.modules), sorted({'tensorflow', 'keras'} & set(sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_bm25_evaluation_and_a_length_analysis_load_neither_keras_nor_tensorflow(tmp_path):
    from beir_files import write_beir

    from gtr_keras.beir.readers import Corpus

    beir = write_beir(
        tmp_path / "beir",
        Corpus(ids=["d1", "d2"], titles=["", ""], texts=["wing lift", "heat flow"]),
        {"q1": "lift of a wing"},
        [("q1", "d1", 1)],
    )
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 2.0 bm25\nq1 Q0 d2 2 1.0 bm25\n")
    script = (
        "import sys\nfrom gtr_keras.cli.main import main\n"
        f"assert main(['evaluate', '--dataset', {str(beir)!r}, '--retriever', 'bm25', '--output-json', "
        f"{str(tmp_path / 'metrics.json')!r}]) == 0\n"
        f"assert main(['analyze-lengths', '--run', {str(tmp_path / 'run.trec')!r}, '--dataset', {str(beir)!r}]) == 0\n"
        "assert not {'tensorflow', 'keras'} & set(sys.modules), sorted({'tensorflow', 'keras'} & set(sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"ndcg@10": 1.0' in (tmp_path / "metrics.json").read_text()


def test_the_parser_answers_without_tensorflow_and_the_package_imports_quietly():
    script = (
        "import sys\nfrom gtr_keras.cli.main import main\n"
        "status = main(['encode', '--model', './no-such-dir', '--input', 'README.md', '--output', 'o.npy'])\n"
        "assert status == 2 and 'tensorflow' not in sys.modules, (status, 'tensorflow' in sys.modules)\n"
        "import gtr_keras\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == "gtr-keras encode: error: ./no-such-dir: no such model directory\n"


def _sources():
    for folder in ("gtr_keras", "tests", "benchmarks", "recipes", "deploy"):
        for directory, _, file_names in os.walk(os.path.join(REPO, folder)):
            yield from (os.path.join(directory, name) for name in sorted(file_names) if name.endswith(".py"))


def test_every_source_compiles_on_python_3_11_to_3_13():
    """Checked on whichever of them runs the tests: no escape sequence that 3.12 warns of (and a later one
    refuses), and no docstring holding a lone surrogate, which 3.13's compiler (it strips docstrings'
    indentation) cannot encode."""
    problems = []
    for path in _sources():
        with open(path, "rb") as f:
            source = f.read()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                tree = ast.parse(source, path)
            except (SyntaxError, SyntaxWarning, DeprecationWarning) as error:
                problems.append(f"{path}: {error}")
                continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                docstring = ast.get_docstring(node, clean=False) or ""
                if any("\ud800" <= character <= "\udfff" for character in docstring):
                    problems.append(f"{path}:{node.body[0].lineno}: a docstring holds a lone surrogate")
    assert problems == []


def test_no_python_module_at_the_repository_root():
    assert [name for name in os.listdir(REPO) if name.endswith(".py")] == []


def test_the_top_level_modules_import_what_the_architecture_says():
    graph = imports(module_names())
    assert graph["gtr_keras.errors"] == set()
    parser = {
        "gtr_keras.cli.helpers.flag_types",
        "gtr_keras.cli.helpers.train_flags",
        "gtr_keras.cli.helpers.shared_flags",
        "gtr_keras.cli.parser",
        "gtr_keras.cli.helpers",
        "gtr_keras.cli.helpers.flag_checks",
        "gtr_keras.cli.commands",
    }
    light = {  # what the parser may import besides: no TensorFlow (`utils.files` imports it on first use)
        "gtr_keras.errors",
        "gtr_keras.utils",
        "gtr_keras.utils.files",
        "gtr_keras.utils.dimensions",  # the rule of `--dimensions`: numpy only inside its functions
        "gtr_keras.models.token_windows",  # the rule of `--passages`: numpy and sentencepiece only inside its functions
        "gtr_keras.models.model_files.model_source",
        "gtr_keras.exports",
        "gtr_keras.exports.export_formats",
        "gtr_keras.storage",
        "gtr_keras.storage.layout",
        "gtr_keras.engines",
        "gtr_keras.engines.targets",  # `--to` and `--index TARGET`: the target parser (`re` only)
    }
    for name in parser:  # what `--help` and argument errors run: no TensorFlow, nothing of the library
        assert graph[name] <= parser | light, name
    # A command's module is imported to parse: its handler imports what it runs when it runs.
    handlers = {"gtr_keras.cli.helpers.handler_inputs", "gtr_keras.cli.helpers.train_runs"}
    commands = {name for name in graph if name.startswith("gtr_keras.cli.commands.")}
    for name in commands | handlers:
        assert module_level_imports(name) <= parser | light | handlers | commands | {
            "gtr_keras.utils.cpu",
            "gtr_keras.utils.locks",
        }, name
    assert graph["gtr_keras.cli.main"] <= parser | {
        "gtr_keras.errors",
        "gtr_keras.models.model_files.model_source",
        "gtr_keras.cli.helpers.console",
    }
    assert graph["gtr_keras.cli.helpers.console"] == set()
    assert graph["gtr_keras.__main__"] == {"gtr_keras.cli.main"}
    # The loaders of other formats at once (no Keras), the model family only when Keras is imported already,
    # the rest on first use.
    assert graph["gtr_keras"] == {
        "gtr_keras.utils.lazy_exports",
        "gtr_keras.convert",
        "gtr_keras.convert.preset_loader",
    }
    assert module_level_imports("gtr_keras.convert.preset_loader") == {
        "gtr_keras.errors",
        "gtr_keras.models.model_files.model_formats",
    }
    assert module_level_imports("gtr_keras.models.model_files.model_formats") == set()
    assert graph["gtr_keras.exports.export_formats"] == {"gtr_keras.errors"}  # what the parser may read
    # `gtr_keras.load`: exports' encoders without TensorFlow (the encoders' types), a model's stack only for a model.
    assert graph["gtr_keras.loading"] == {
        "gtr_keras.errors",
        "gtr_keras.exports.export_formats",
        "gtr_keras.models.text_encoder",
        "gtr_keras.saving",
    }
    # The user's loading and saving, above the model family and the converters.
    assert {name.split(".")[1] for name in graph["gtr_keras.saving"]} <= {"errors", "utils", "models", "convert"}


def _converters_and_what_they_import():
    graph = imports(module_names())
    converters = {name for name in graph if name.startswith("gtr_keras.convert.")}
    return sorted(converters | {target for name in converters for target in graph[name]} - {"gtr_keras.errors"})


@pytest.mark.large
@pytest.mark.parametrize("module", _converters_and_what_they_import())
def test_the_converters_and_the_family_modules_they_import_import_first_in_a_fresh_process(module):
    """The converters import the model family, whose `__init__` imports the embedder, which loads through the
    converters: each of these modules imported first must not meet a half-imported one."""
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]


def _python_of(path):
    """A script's text, or a notebook's code cells one after the other (IPython's `%` and `!` lines blanked)."""
    text = open(path, encoding="utf-8").read()
    if not path.endswith(".ipynb"):
        return text
    lines = []
    for cell in json.loads(text)["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"]).splitlines()
            lines += ["" if line.lstrip().startswith(("%", "!")) else line for line in source]
    return "\n".join(lines)


def _imports_of_gtr_keras(path):
    """`[(line, module, name)]` of every use of gtr-keras in a script or notebook (a notebook's line counts
    through its code cells): `from M import N` (name N), `import M` (name None) and `gtr_keras.N` (module
    `gtr_keras`, name N)."""
    uses = []
    for node in ast.walk(ast.parse(_python_of(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gtr_keras":
            uses += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            uses += [(node.lineno, alias.name, None) for alias in node.names if alias.name.split(".")[0] == "gtr_keras"]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "gtr_keras":
            uses.append((node.lineno, "gtr_keras", node.attr))
    return uses


def _defined_names(path):
    """The names a module defines at its top level (classes, functions, assignments, imports)."""
    names = set()
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def _refused(uses):
    """The uses of gtr-keras a script may not make: a name through a package that does not export it (a public
    name is in its package's `__all__`), or a name its module does not define."""
    modules = module_names()
    refused = []
    for line, module, name in uses:
        names, path = public_names(module), modules.get(module)
        if path is None:
            refused.append((line, module, name))
        elif name is None or (names is not None and name in names) or f"{module}.{name}" in modules:
            continue
        elif path.endswith("__init__.py") or name not in _defined_names(path):
            refused.append((line, module, name))
    return refused


def test_benchmarks_and_recipes_use_public_names_or_the_modules_that_define_them():
    """A script or notebook imports a public name from its package, or a lower layer's name (`SearchIndex`,
    `TrainingData`'s tokenizer, ...) from the module that defines it, as tests do: never an internal name through
    a package."""
    private = []
    for folder in ("benchmarks", "recipes"):
        for directory, _, file_names in os.walk(os.path.join(REPO, folder)):
            for file_name in (name for name in file_names if name.endswith((".py", ".ipynb"))):
                path = os.path.join(directory, file_name)
                for line, module, name in _refused(_imports_of_gtr_keras(path)):
                    private.append(f"{os.path.relpath(path, REPO)}:{line}: {module} {name or ''}".rstrip())
    assert private == []


def test_the_public_names_check_finds_internal_imports(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text(
        "import gtr_keras\nimport gtr_keras.storage\nfrom gtr_keras import Index, build_index\n"
        "from gtr_keras.storage import SearchIndex\nfrom gtr_keras.storage.layout import INDEX_JSON, NO_SUCH\n"
        "from gtr_keras.cli.helpers.demo_steps import DEMO_MODEL\nfrom gtr_keras.errors import run_script\n"
        "gtr_keras.load('m'); gtr_keras.Retriever\nfrom gtr_keras.retrieval import Index\n"
    )
    assert sorted(_refused(_imports_of_gtr_keras(str(script)))) == [
        (3, "gtr_keras", "build_index"),
        (4, "gtr_keras.storage", "SearchIndex"),
        (5, "gtr_keras.storage.layout", "NO_SUCH"),
        (8, "gtr_keras", "Retriever"),
        (9, "gtr_keras.retrieval", "Index"),
    ]


def test_the_public_names_check_reads_a_notebooks_code_cells(tmp_path):
    notebook = tmp_path / "recipe.ipynb"
    cells = [
        {"cell_type": "markdown", "source": ["from gtr_keras.beir import format_table\n"]},
        {"cell_type": "code", "source": ["%load_ext tensorboard\n", "from gtr_keras import evaluate\n"]},
        {"cell_type": "code", "source": ["!gtr-keras export\n", "from gtr_keras.beir import format_table\n"]},
    ]
    notebook.write_text(json.dumps({"cells": cells}))
    assert _refused(_imports_of_gtr_keras(str(notebook))) == [(4, "gtr_keras.beir", "format_table")]


def test_the_library_never_prints_and_each_module_logs_under_its_own_name():
    """Outside `cli/`, no `print` and no direct write to stdout (a program that embeds gtr-keras routes or silences
    its lines with `logging`); a module's logger is `logging.getLogger(__name__)`, under `gtr_keras`."""
    found = []
    for name, path in module_names().items():
        if name.startswith("gtr_keras.cli"):
            continue
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if not isinstance(node, ast.Call):
                continue
            call = ast.unparse(node.func)
            if call in ("print", "sys.stdout.write"):
                found.append(f"{name}:{node.lineno}: {call}")
            if call == "logging.getLogger" and [ast.unparse(arg) for arg in node.args] != ["__name__"]:
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
