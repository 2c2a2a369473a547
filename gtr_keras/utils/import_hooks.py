"""Post-import hooks without a third-party package: `when_imported(name, hook)` runs `hook(module)` once
the module `name` has been executed, or at once if it is imported already.

A finder placed first on `sys.meta_path` answers only for the modules that a hook waits for: it asks the
other finders for the module's spec and wraps its loader, so that the hooks run right after the module's
code, before the import statement that asked for it returns. A module imported as the parent of another
(`a.b` for `import a.b.c`) counts as imported. With `settled`, a hook waits until no module of that
prefix is half imported either: a hook that imports modules of the package that triggered it then never
meets one of them half done, whichever of them the process imported first.

Example:
>>> when_imported("keras", lambda keras: print(keras.__name__))  # doctest: +SKIP
"""

import importlib.abc
import importlib.util
import sys

_PENDING = []  # [name, hook, settled] waiting to run


def _initializing(module):
    return getattr(getattr(module, "__spec__", None), "_initializing", False)


def _ready(name, settled, running):
    module = sys.modules.get(name)
    if module is None or (module is not running and _initializing(module)):
        return False
    return not settled or not any(
        other is not running and key.startswith(settled) and _initializing(other)
        for key, other in list(sys.modules.items())
    )


def _run_ready(running=None):
    for entry in list(_PENDING):
        name, hook, settled = entry
        if entry in _PENDING and _ready(name, settled, running):
            _PENDING.remove(entry)
            hook(sys.modules[name])


class _HookedLoader(importlib.abc.Loader):
    """The module's own loader, then the hooks that are ready; the module keeps its own loader afterwards."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # `get_code`, `get_resource_reader`, ...: the module's own loader's
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self.loader
        self.loader.exec_module(module)
        _run_ready(running=module)


class _HookFinder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.finding = set()

    def find_spec(self, name, path, target=None):
        watched = any(name == entry[0] or (entry[2] and name.startswith(entry[2])) for entry in _PENDING)
        if not watched or name in self.finding:
            return None
        self.finding.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.finding.discard(name)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _HookedLoader(spec.loader)
        return spec


_FINDER = _HookFinder()


def when_imported(name, hook, settled=None):
    """Calls `hook(module)` once the module `name` is imported (now, if it is already).

    Args:
        name: a module's full name (`"keras"`, `"gtr_keras.models.gtr"`).
        hook: a function of the module.
        settled: a module name prefix (`"gtr_keras."`): the hook also waits until no module of it is
            half imported.

    Example:
    >>> when_imported("json", lambda json: print(json.__name__))
    json
    """
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    _PENDING.append([name, hook, settled])
    _run_ready()
