"""Loss reductions shared by the task heads (`bertzoo.models.tasks`) and the
distillation losses (`bertzoo.distill.losses`), written with `keras.ops`."""

from keras import ops

# Label of token positions that are not scored (sub-tokens after a word's
# first, special tokens, padding): the loss gives them weight 0.
IGNORE_LABEL = -100


def weighted_mean(values, weights=None):
    """`sum(values * w) / sum(w)` in float32 (0 when every weight is 0); the
    plain mean when `weights` is None. `weights` is reshaped to the shape of
    `values` (e.g. a `(batch, 1)` sample weight for `(batch,)` losses)."""
    values = ops.cast(values, "float32")
    if weights is None:
        return ops.mean(values)
    weights = ops.cast(ops.reshape(weights, ops.shape(values)), "float32")
    return ops.sum(values * weights) / ops.maximum(ops.sum(weights), 1e-12)
