"""Small pieces shared by every bertzoo layer: initialisers, activations and
config serialisation."""

import inspect

import keras

# Activation names accepted in configs. "gelu" is the exact (erf) GELU that HF
# "gelu", ELECTRA and TinyBERT use; "gelu_approximate" is the tanh form used by
# the original Google BERT and ALBERT code (they differ by up to ~4.7e-4).
_ACTIVATIONS = {
    "gelu": lambda x: keras.activations.gelu(x, approximate=False),
    "gelu_approximate": lambda x: keras.activations.gelu(x, approximate=True),
    "relu": keras.activations.relu,
    "silu": keras.activations.silu,
    "tanh": keras.activations.tanh,
}

ACTIVATION_NAMES = tuple(sorted(_ACTIVATIONS))


def get_activation(name):
    """Returns the activation function for a config name, with a clear error."""
    if name not in _ACTIVATIONS:
        raise ValueError(
            f"Unknown activation {name!r}. Valid activations: {', '.join(ACTIVATION_NAMES)}."
        )
    return _ACTIVATIONS[name]


def kernel_initializer(stddev=0.02):
    """The reference BERT initialiser: truncated normal with stddev 0.02."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


def constructor_args(cls):
    """Names of `cls`'s own constructor arguments; `dtype` and `**kwargs` are
    left to Keras."""
    params = inspect.signature(cls.__init__).parameters
    return tuple(k for k in params if k not in ("self", "kwargs", "dtype"))


def constructor_config(obj):
    """`obj`'s constructor arguments, read back from the attributes of the same
    names (every bertzoo layer and model stores each argument that way), for
    `get_config`."""
    return {k: getattr(obj, k) for k in constructor_args(type(obj))}


def group_of_layer(layer_index, num_layers, num_groups):
    """ALBERT's layer -> parameter group map, `floor(i / num_layers *
    num_groups)` as in the reference code, in exact integer arithmetic (the
    reference's float form maps e.g. layer 15 of 22 to group 14 when
    num_groups == num_layers)."""
    return layer_index * num_groups // num_layers
