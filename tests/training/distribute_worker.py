"""Subprocess helper of test_distribute.py: trains a tiny BertPretrainer for a
few steps under given strategies and saves what the test compares.

    python tests/training/distribute_worker.py --cpu-devices 2 --out runs.npz \
        --run single=default --run mirrored=mirrored --run clipped=mirrored,clip=1.0

Device settings must come before TensorFlow/JAX initialise their devices,
which is why this runs in a fresh process: `--cpu-devices N` makes N logical
CPU devices (TensorFlow); for JAX the parent sets
`XLA_FLAGS=--xla_force_host_platform_device_count=N`. `TF_CONFIG` (for
multi_worker) and `KERAS_BACKEND` also come from the environment.

For every run NAME the output .npz holds `NAME/init/<i>` and
`NAME/final/<i>` (the model's weights before and after `fit`, in
`model.weights` order), `NAME/paths`, `NAME/history` (JSON: the loss and
metrics of every step) and `NAME/info` (JSON: num_replicas, num_workers,
worker_index, is_chief, jit_compile, iterations, weight_devices); with
`--tpu-error`, `tpu_error` (JSON: what make_distribution("tpu") raised).
"""

import argparse
import json
import os
import sys
import time

# Constants of the run (shared by every process of a comparison).
VOCAB, SEQ, PREDICTIONS = 64, 16, 4
SEED = 1234
LEARNING_RATE = 1e-3


def synthetic_data(num_examples, seed=0):
    """(x, y, sample_weight) arrays as `bertzoo.data.pipeline` produces,
    objective "nsp". Every row has exactly 3 real predictions (weights
    1, 1, 1, 0), so every replica's MLM normaliser `sum(w)` is the same and
    tf.distribute's mean-of-replica-means equals the global mean."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(SEQ // 2, SEQ + 1, size=num_examples)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype("int32")
    token_ids = rng.integers(5, VOCAB, size=(num_examples, SEQ)).astype("int32") * mask
    token_ids[:, 0] = 2  # [CLS]
    segment_ids = ((np.arange(SEQ)[None, :] >= (lengths // 2)[:, None]).astype("int32")) * mask
    positions = np.stack(
        [np.sort(rng.choice(np.arange(1, n), size=PREDICTIONS, replace=False)) for n in lengths]
    ).astype("int32")
    mlm_ids = np.take_along_axis(token_ids, positions, axis=1).astype("int32")
    token_ids = token_ids.copy()
    np.put_along_axis(token_ids, positions[:, :3], 4, axis=1)  # [MASK]
    weights = np.tile(np.array([1, 1, 1, 0], "float32"), (num_examples, 1))
    positions[:, 3] = 0  # the padding prediction
    mlm_ids[:, 3] = 0
    sentence = rng.integers(0, 2, size=num_examples).astype("int32")
    x = {
        "token_ids": token_ids,
        "segment_ids": segment_ids,
        "padding_mask": mask,
        "mask_positions": positions,
    }
    y = {"mlm": mlm_ids, "sentence": sentence}
    sample_weight = {"mlm": weights, "sentence": np.ones(num_examples, "float32")}
    return x, y, sample_weight


def _devices_holding(variable):
    """How many of this process's devices hold a copy of `variable`."""
    value = variable.value
    if hasattr(value, "sharding"):  # a JAX array
        return len(value.sharding.device_set)
    return len(getattr(value, "values", (value,)))  # tf.distribute MirroredVariable


def tpu_error():
    """make_distribution("tpu") on a machine without a TPU: the error (type
    and message) it raises, or None. Run last: it touches TF's cluster setup."""
    from bertzoo.training.distribute import make_distribution

    try:
        make_distribution("tpu")
    except Exception as e:  # noqa: BLE001 - the test checks the type
        return {
            "type": type(e).__name__,
            "bases": [c.__name__ for c in type(e).__mro__],
            "message": str(e),
        }
    return None


def _global_dataset(arrays, batch, shard_policy):
    """The global batches, auto-sharded with `shard_policy`. DATA: every
    worker of a multi_worker run reads the whole dataset and keeps its share
    of every global batch, so step k trains on global batch k, as a single
    process does (OFF would give every worker the same per-replica batches;
    AUTO tries FILE, falls back to DATA here)."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(arrays).batch(batch, drop_remainder=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = getattr(
        tf.data.experimental.AutoShardPolicy, shard_policy
    )
    return dataset.with_options(options)


def _per_worker_dataset(distribution, arrays, steps, batch, mode):
    """Each input pipeline builds only its own rows of every global batch
    (pipeline w: rows w*per .. (w+1)*per - 1 of global batch k, the rows
    DATA sharding would give it), batched per replica. "function":
    `strategy.distribute_datasets_from_function`; "per_worker_off": the
    pipeline's dataset given to fit with auto-sharding OFF (measured: TF
    rebatches it to global_batch / num_replicas, so a step trains on half
    of each worker's rows and the run differs from a single process by
    3.8e-3)."""
    import numpy as np
    import tensorflow as tf

    def rows(pipeline, pipelines):
        per = batch // pipelines
        index = np.concatenate(
            [
                np.arange(k * batch + pipeline * per, k * batch + (pipeline + 1) * per)
                for k in range(steps)
            ]
        )
        taken = tf.nest.map_structure(lambda a: a[index], arrays)
        return tf.data.Dataset.from_tensor_slices(taken), per

    if mode == "function":

        def dataset_fn(context):
            dataset, per = rows(context.input_pipeline_id, context.num_input_pipelines)
            assert per == context.get_per_replica_batch_size(batch), (per, context)
            return dataset.batch(per, drop_remainder=True)

        return distribution.strategy.distribute_datasets_from_function(dataset_fn)
    dataset, per = rows(distribution.worker_index, distribution.num_workers)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.batch(per, drop_remainder=True).with_options(options)


_MULTI_WORKER = {}


def train(strategy, steps, batch, clipnorm=None, jit_compile=True, shard_policy="DATA"):
    """One run: `make_distribution(strategy)`, a fresh tiny pretrainer built
    in its scope, compiled with `jit_compile` where the strategy allows it,
    `fit` for `steps` steps of global batch `batch`. Returns (init weights,
    final weights, paths, history, info)."""
    import keras

    from bertzoo.models.backbone import BertBackbone
    from bertzoo.models.pretrainer import BertPretrainer
    from bertzoo.training.distribute import make_distribution
    from bertzoo.training.optimizers import make_optimizer

    start = time.perf_counter()
    keras.backend.clear_session()  # same layer names (weight paths) every run
    if strategy == "multi_worker":
        # One MultiWorkerMirroredStrategy per process: a second one breaks
        # the collectives of the first ("Delete called on non-empty
        # BufRendezvous"), so later runs of this process reuse it.
        if "multi_worker" not in _MULTI_WORKER:
            _MULTI_WORKER["multi_worker"] = make_distribution(strategy)
        distribution = _MULTI_WORKER["multi_worker"]
    else:
        distribution = make_distribution(strategy)  # after clear_session (it resets JAX's)
    distribution.check_batch_size(batch)

    x, y, sample_weight = synthetic_data(steps * batch)
    if shard_policy in ("function", "per_worker_off"):
        dataset = _per_worker_dataset(
            distribution, (x, y, sample_weight), steps, batch, shard_policy
        )
    else:
        dataset = _global_dataset((x, y, sample_weight), batch, shard_policy)

    keras.utils.set_random_seed(SEED)
    with distribution.scope():
        backbone = BertBackbone(
            vocabulary_size=VOCAB,
            num_layers=2,
            num_heads=2,
            hidden_dim=16,
            intermediate_dim=32,
            max_sequence_length=SEQ,
            dropout=0.0,
        )
        model = BertPretrainer(backbone, objective="nsp")
        optimizer = make_optimizer(
            "adamw", LEARNING_RATE, total_steps=steps, warmup_steps=0, global_clipnorm=clipnorm
        )
        model.compile(
            optimizer=optimizer, jit_compile=distribution.resolve_jit_compile(jit_compile)
        )
    init = model.get_weights()
    # One step per epoch: the logs hold every step's loss and metrics (the
    # iterator carries on across epochs when steps_per_epoch is given).
    history = model.fit(dataset, epochs=steps, steps_per_epoch=1, verbose=0)
    final = model.get_weights()
    info = {
        "strategy": strategy,
        "num_replicas": distribution.num_replicas,
        "num_workers": distribution.num_workers,
        "worker_index": distribution.worker_index,
        "is_chief": distribution.is_chief,
        "jit_compile": bool(model.jit_compile),
        "iterations": int(keras.ops.convert_to_numpy(optimizer.iterations)),
    }
    info["weight_devices"] = _devices_holding(model.weights[0])
    info["seconds"] = round(time.perf_counter() - start, 2)
    history = {k: [float(v) for v in vs] for k, vs in history.history.items()}
    return init, final, [w.path for w in model.weights], history, info


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--run",
        action="append",
        required=True,
        help="NAME=STRATEGY[,clip=NORM][,jit=0]: one run, saved under NAME/ (clip: "
        "global_clipnorm, default none; jit=0: no XLA; data=DATA|OFF|function|per_worker_off: how the workers read); repeat for several runs in this process",
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--cpu-devices", type=int, default=0)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--tpu-error", action="store_true", help="finally try strategy 'tpu' (no TPU here)"
    )
    args = parser.parse_args(argv)

    if os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow" and args.cpu_devices:
        import tensorflow as tf

        (cpu,) = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.cpu_devices
        )

    import numpy as np

    arrays = {}
    for spec in args.run:
        name, _, rest = spec.partition("=")
        strategy, *options = rest.split(",")
        options = dict(option.split("=") for option in options)
        init, final, paths, history, info = train(
            strategy,
            args.steps,
            args.batch,
            clipnorm=float(options["clip"]) if "clip" in options else None,
            jit_compile=options.get("jit", "1") == "1",
            shard_policy=options.get("data", "DATA"),
        )
        arrays.update({f"{name}/init/{i}": w for i, w in enumerate(init)})
        arrays.update({f"{name}/final/{i}": w for i, w in enumerate(final)})
        arrays[f"{name}/paths"] = np.array(paths)
        arrays[f"{name}/history"] = np.array(json.dumps(history))
        arrays[f"{name}/info"] = np.array(json.dumps(info))
    if args.tpu_error:
        arrays["tpu_error"] = np.array(json.dumps(tpu_error()))
    np.savez(args.out, **arrays)
    return 0


if __name__ == "__main__":
    sys.exit(main())
