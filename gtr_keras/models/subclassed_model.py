"""`SubclassedModelType`: the metaclass of gtr-keras' subclassed keras-hub models (`GTRBackbone`,
`GTRTextEmbedder`), which keeps their method order that of a subclassed `keras.Model`.

keras-hub's backbones and tasks are functional models. Keras builds a functional model of a `keras.Model`
subclass by putting its `Functional` class into the bases of each class on the way up
(`keras.Model.__init__`), `keras_hub.models.Backbone` and `Task` included, for the rest of the process: after
one `BertBackbone` is built, every class below `Backbone` inherits from `Functional`, and a subclassed model
of them runs `Functional.__init__` and fails. Python computes a class's method resolution order with its
metaclass' `mro()` (again whenever the bases of a class above it change): this one leaves out the classes of
Keras that come before `keras.Model` in it, which only such a rewrite puts there, so a GTR model keeps the
order it has without one, `isinstance(model, Functional)` stays false, and keras-hub's classes and the
functional models built from them stay as Keras made them.
"""

import keras


class SubclassedModelType(type):
    """A `keras.Model` subclass' metaclass that keeps Keras' `Functional` out of its method order.

    Example:
    >>> class Tower(keras_hub.models.Backbone, metaclass=SubclassedModelType):
    ...     pass
    >>> bert = keras_hub.models.BertBackbone(vocabulary_size=10, num_layers=1, num_heads=1, hidden_dim=2,
    ...                                      intermediate_dim=4)
    >>> [cls.__name__ for cls in keras_hub.models.Backbone.__mro__[:2]]
    ['Backbone', 'Functional']
    >>> [cls.__name__ for cls in Tower.__mro__[:3]]
    ['Tower', 'Backbone', 'Model']
    """

    def mro(cls):
        order = super().mro()
        if keras.Model not in order:
            return order
        model = order.index(keras.Model)
        return [base for base in order[:model] if not _of_keras(base)] + order[model:]


def _of_keras(cls):
    return cls.__module__ == "keras" or cls.__module__.startswith("keras.")
