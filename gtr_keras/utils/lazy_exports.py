"""A package's public names, each imported from the module that defines it when first used (PEP 562's
module `__getattr__`), so that importing the package costs nothing of what its names need.

Example:
>>> __all__, __getattr__ = lazy_exports(__name__, {"SearchIndex": "gtr_keras.storage.search_index"})
"""

import importlib


def lazy_exports(package, exports):
    """`(__all__, __getattr__)` for the package `package` whose public names are `exports`' keys.

    Args:
        package: the package's `__name__`.
        exports: `{name: module}`: the module that defines each name (or, for a name that is a module of the
            package, that module itself).

    Example:
    >>> names, getattr_ = lazy_exports("gtr_keras.utils", {"files": "gtr_keras.utils.files"})
    >>> names, getattr_("files").__name__
    (['files'], 'gtr_keras.utils.files')
    """

    def __getattr__(name):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(exports[name])
        return module if module.__name__ == f"{package}.{name}" else getattr(module, name)

    return sorted(exports), __getattr__
