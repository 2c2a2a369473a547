"""Post-import hooks without a third-party package: `when_imported(name, hook)` runs `hook(module)` once
the module `name` has been executed, or at once if it is imported already.

A finder placed first on `sys.meta_path` answers only for the names that have a hook waiting: it asks the
other finders for the module's spec and wraps its loader, so that the hooks run right after the module's
code, before the import statement that asked for it returns. A module imported as the parent of another
(`a.b` for `import a.b.c`) counts as imported.

Example:
>>> when_imported("keras", lambda keras: print(keras.__name__))  # doctest: +SKIP
"""

import importlib.abc
import importlib.util
import sys

_HOOKS = {}


class _HookedLoader(importlib.abc.Loader):
    """The module's own loader, then its hooks; the module keeps its own loader afterwards."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self.loader
        self.loader.exec_module(module)
        for hook in _HOOKS.pop(module.__name__, []):
            hook(module)


class _HookFinder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.finding = set()

    def find_spec(self, name, path, target=None):
        if name not in _HOOKS or name in self.finding:
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


def when_imported(name, hook):
    """Calls `hook(module)` once the module `name` is imported (now, if it is already).

    Args:
        name: a module's full name (`"keras"`, `"gtr_keras.models.gtr"`).
        hook: a function of the module.

    Example:
    >>> when_imported("json", lambda json: print(json.__name__))
    json
    """
    module = sys.modules.get(name)
    if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
        hook(module)
        return
    _HOOKS.setdefault(name, []).append(hook)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
