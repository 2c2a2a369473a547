"""GTR's subclassed keras-hub models beside functional ones (BERT and the rest of keras-hub) in one process.

To build a functional model of a `keras.Model` subclass, Keras puts `Functional`
into the class hierarchy (`inject_functional_model_class`): it rewrites the
bases of every class on the way up, so building one `BertBackbone` turns
`keras_hub.models.Backbone` (and `Task`) into subclasses of `Functional` for the
rest of the process, and every subclassed model of them, GTR's included, then
runs `Functional.__init__` and fails. `install()` (run when the model family
`gtr_keras.models.gtr` is imported, which `import gtr_keras` does as soon as
Keras is imported) makes Keras add `Functional` to the bases of the class being built
instead, leaving the shared keras-hub classes as they are: the functional model
gets the same method order, and GTR's classes keep theirs. A functional
keras-hub model built before the family is imported has already rewritten the
shared classes: import `gtr_keras` first.
"""

from keras.src.models import functional
from keras.src.models import model as keras_model
from keras_hub.src.models.backbone import Backbone
from keras_hub.src.models.task import Task

_SHARED = (Backbone, Task)


def _inject_at_the_class(cls, inject=keras_model.inject_functional_model_class):
    """Keras' `inject_functional_model_class`, except below keras-hub's shared base classes."""
    if issubclass(cls, functional.Functional):
        return cls
    if cls not in _SHARED and issubclass(cls, _SHARED):
        cls.__bases__ = (*cls.__bases__, functional.Functional)
        cls.__new__(cls)  # the class swap Keras triggers after injecting, as in `inject_functional_model_class`
        return cls
    return inject(cls)


def install():
    """Routes Keras' injection through `_inject_at_the_class` (idempotent).

    Example:
    >>> install()
    >>> bert = keras_hub.models.BertBackbone(vocabulary_size=10, num_layers=1, num_heads=1, hidden_dim=2,
    ...                                      intermediate_dim=4)  # doctest: +SKIP
    >>> keras_hub.models.Backbone.__bases__ == (keras.Model,)  # doctest: +SKIP
    True
    """
    keras_model.inject_functional_model_class = _inject_at_the_class
