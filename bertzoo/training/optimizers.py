"""Pre-training optimizers: AdamW and LAMB with the reference exclusions,
and a factory that adds the schedule, clipping, gradient accumulation and
loss scaling."""

import keras
from keras import ops

from bertzoo.training.runs import OPTIMIZERS  # noqa: F401  (the choices made here)
from bertzoo.training.schedules import WarmupLinearDecay

# Substrings of a variable's path that exclude it from weight decay (and, for
# LAMB, from the layer-wise trust ratio), as the reference code's
# ["LayerNorm", "layer_norm", "bias"]. bertzoo's LayerNorms are all named
# "*layer_norm"; "LayerNorm" covers models with HF-style names.
DEFAULT_EXCLUSIONS = ("layer_norm", "LayerNorm", "bias")


def _excluded(variable, patterns):
    path = getattr(variable, "path", None) or variable.name
    return any(p in path for p in patterns)


def uses_weight_decay(variable, exclusions=DEFAULT_EXCLUSIONS):
    """True when `variable` is decayed: its path holds none of `exclusions`."""
    return not _excluded(variable, exclusions)


def _dense_gradients(grads):
    """Converts TensorFlow `IndexedSlices` gradients (embedding lookups) to
    dense tensors. Keras' element-wise ops act on the slices one by one
    (`keras.src.backend.tensorflow.sparse.elementwise_unary`), so with a
    repeated index (a token or segment id seen twice in the batch)
    `ops.square` sums the squares of the slices instead of squaring their sum:
    the global norm used for clipping (`base_optimizer.global_norm`) and
    Adam's / LAMB's second moment come out wrong. Summing the slices first
    gives the true gradient, as on JAX and as Keras' own gradient
    accumulation does (`g + acc_g`)."""
    if keras.backend.backend() != "tensorflow":
        return grads
    import tensorflow as tf

    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]


def _all_reduce_gradients(grads):
    """Sums gradients over tf.distribute replicas (None entries kept)."""
    if keras.backend.backend() != "tensorflow":
        return grads
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return grads
    present = [g for g in grads if g is not None]
    reduced = iter(context.all_reduce(tf.distribute.ReduceOp.SUM, present))
    return [None if g is None else next(reduced) for g in grads]


class _DenseGradientsMixin:
    """Dense gradients (see `_dense_gradients`), and under a TensorFlow
    strategy the all-reduce before clipping: Keras 3.15 clips each replica's
    gradients by their own norm (`BaseOptimizer._clip_gradients`) and sums
    them afterwards (`TFOptimizer._backend_update_step`), so a mirrored run
    would not clip by the global batch's norm as a single device does."""

    def apply(self, grads, trainable_variables=None):
        return super().apply(_dense_gradients(list(grads)), trainable_variables)

    def _clip_gradients(self, grads):
        return super()._clip_gradients(_all_reduce_gradients(list(grads)))

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)  # done before clipping, above


@keras.saving.register_keras_serializable(package="bertzoo")
class AdamW(_DenseGradientsMixin, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` with BERT's defaults (betas 0.9/0.999,
    epsilon 1e-6, weight decay 0.01) and decay excluded from variables whose
    path contains any of `exclude_from_weight_decay` (LayerNorm gammas/betas
    and all biases by default).

    Keras' AdamW decays decoupled from the gradient (`w -= lr * wd * w`), as
    the reference does; unlike google-research/bert's AdamWeightDecayOptimizer
    it applies Adam's bias correction.

    Example:
    >>> opt = AdamW(learning_rate=1e-4, global_clipnorm=1.0)
    """

    def __init__(
        self,
        learning_rate=1e-4,
        weight_decay=0.01,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        exclude_from_weight_decay=DEFAULT_EXCLUSIONS,
        name="adamw",
        **kwargs,
    ):
        super().__init__(
            learning_rate=learning_rate,
            weight_decay=weight_decay,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=epsilon,
            name=name,
            **kwargs,
        )
        self.exclusions = tuple(exclude_from_weight_decay or ())

    def _use_weight_decay(self, variable):
        # Path-based instead of Keras' match on the short variable name, so
        # "layer_norm/gamma" is recognised as a LayerNorm variable.
        return uses_weight_decay(variable, self.exclusions)

    def get_config(self):
        return {**super().get_config(), "exclude_from_weight_decay": list(self.exclusions)}


@keras.saving.register_keras_serializable(package="bertzoo")
class Lamb(_DenseGradientsMixin, keras.optimizers.Optimizer):
    """LAMB (You et al. 2019), as used for ALBERT pre-training.

    Per variable, with bias-corrected Adam moments:

        r = m_hat / (sqrt(v_hat) + epsilon)
        r = r + weight_decay * w                 (unless excluded from decay)
        ratio = ||w|| / ||r|| if both > 0 else 1 (unless excluded from
                                                  layer adaptation)
        w = w - lr * ratio * r

    `exclude_from_layer_adaptation` defaults to `exclude_from_weight_decay`
    (LayerNorm and bias variables), as in the reference.

    Example:
    >>> opt = Lamb(learning_rate=1.76e-3, global_clipnorm=1.0)
    """

    def __init__(
        self,
        learning_rate=1e-3,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        weight_decay=0.01,
        exclude_from_weight_decay=DEFAULT_EXCLUSIONS,
        exclude_from_layer_adaptation=None,
        name="lamb",
        **kwargs,
    ):
        # weight_decay is applied inside the update (before the trust ratio),
        # not by the base class's decoupled decay: keep the base's None.
        kwargs.pop("weight_decay", None)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.lamb_weight_decay = weight_decay
        self.exclusions = tuple(exclude_from_weight_decay or ())
        self.adaptation_exclusions = (
            self.exclusions
            if exclude_from_layer_adaptation is None
            else tuple(exclude_from_layer_adaptation)
        )

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums = self.add_optimizer_variables(var_list, "momentum")
        self._velocities = self.add_optimizer_variables(var_list, "velocity")

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        gradient = ops.cast(gradient, dtype)
        t = ops.cast(self.iterations + 1, dtype)
        beta_1 = ops.cast(self.beta_1, dtype)
        beta_2 = ops.cast(self.beta_2, dtype)
        index = self._get_variable_index(variable)
        m = self._momentums[index]
        v = self._velocities[index]
        self.assign(m, m * beta_1 + gradient * (1.0 - beta_1))
        self.assign(v, v * beta_2 + ops.square(gradient) * (1.0 - beta_2))
        m_hat = m / (1.0 - ops.power(beta_1, t))
        v_hat = v / (1.0 - ops.power(beta_2, t))
        update = m_hat / (ops.sqrt(v_hat) + self.epsilon)
        if self.lamb_weight_decay and not _excluded(variable, self.exclusions):
            update = update + ops.cast(self.lamb_weight_decay, dtype) * variable
        if not _excluded(variable, self.adaptation_exclusions):
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            r_norm = ops.sqrt(ops.sum(ops.square(update)))
            ratio = ops.where(
                ops.logical_and(w_norm > 0, r_norm > 0),
                w_norm / ops.maximum(r_norm, 1e-30),
                ops.ones_like(w_norm),
            )
            update = update * ratio
        self.assign_sub(variable, lr * update)

    def get_config(self):
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "weight_decay": self.lamb_weight_decay,
            "exclude_from_weight_decay": list(self.exclusions),
            "exclude_from_layer_adaptation": list(self.adaptation_exclusions),
        }


def make_optimizer(
    name,
    learning_rate,
    total_steps,
    warmup_steps=0,
    weight_decay=0.01,
    beta_1=0.9,
    beta_2=0.999,
    epsilon=1e-6,
    global_clipnorm=1.0,
    gradient_accumulation_steps=None,
    loss_scaling=False,
    continuous_decay=False,
    exclude_from_weight_decay=DEFAULT_EXCLUSIONS,
):
    """Builds the pre-training optimizer: AdamW or LAMB with a
    `WarmupLinearDecay` schedule, global gradient clipping, optional
    gradient accumulation and optional dynamic loss scaling (for float16
    mixed precision; bfloat16 needs none).

    Args:
        name: "adamw" or "lamb".
        learning_rate: the peak learning rate.
        total_steps: weight updates in the run (the rate is 0 there).
        warmup_steps: weight updates of linear warmup.
        weight_decay: decoupled (AdamW) or in-update (LAMB) weight decay.
        global_clipnorm: clip the global gradient norm to this (None: off).
        gradient_accumulation_steps: average this many micro-batches per
            update (None or 1: off). `total_steps` and `warmup_steps` still
            count updates.
        loss_scaling: wrap in `keras.optimizers.LossScaleOptimizer`.
        continuous_decay: see `WarmupLinearDecay`.

    Example:
    >>> opt = make_optimizer("lamb", 1.76e-3, total_steps=125000, warmup_steps=3125)
    """
    key = str(name).lower()
    if key not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer {name!r}. Valid: {', '.join(OPTIMIZERS)}.")
    accumulate = gradient_accumulation_steps
    if accumulate is not None and accumulate <= 1:
        accumulate = None
    schedule = WarmupLinearDecay(
        learning_rate,
        warmup_steps=warmup_steps,
        total_steps=total_steps,
        continuous=continuous_decay,
        micro_steps=accumulate or 1,
    )
    common = dict(
        learning_rate=schedule,
        weight_decay=weight_decay,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        exclude_from_weight_decay=exclude_from_weight_decay,
        global_clipnorm=global_clipnorm,
        gradient_accumulation_steps=accumulate,
    )
    optimizer = AdamW(**common) if key == "adamw" else Lamb(**common)
    if loss_scaling:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
