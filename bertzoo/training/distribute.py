"""Distribution strategies for pre-training: one name -> one `Distribution`.

    distribution = make_distribution("mirrored")
    distribution.check_batch_size(global_batch_size)
    with distribution.scope():          # model AND optimizer AND compile
        model = BertPretrainer(backbone)
        model.compile(optimizer=make_optimizer(...))
    model.fit(dataset_batched_with_the_global_batch_size, ...)
    if distribution.is_chief:
        ...                              # write checkpoints, logs, presets

Strategies (`STRATEGIES`):

- "default": no distribution; one device (the first GPU/TPU core if any,
  else the CPU).
- "mirrored": synchronous data parallelism over all devices of this machine
  (every GPU; without GPUs, every CPU device, i.e. the logical CPU devices
  when `tf.config.set_logical_device_configuration` made several). Each
  replica holds a copy of the weights; gradients are all-reduced every step.
  TensorFlow: `tf.distribute.MirroredStrategy`; JAX: same as "data_parallel".
- "multi_worker": "mirrored" across several processes/machines
  (TensorFlow only: `tf.distribute.MultiWorkerMirroredStrategy`). Every
  process runs the same program with its own `TF_CONFIG` environment
  variable, e.g. for the first of two workers
  `{"cluster": {"worker": ["host1:12345", "host2:12345"]},
    "task": {"type": "worker", "index": 0}}`.
  The chief (task type "chief", or worker 0 when the cluster has none)
  writes the outputs. Call `make_distribution` at program start, before any
  TensorFlow op runs (collective ops can only be configured then).
- "tpu": a Cloud TPU. TensorFlow: `tf.distribute.TPUStrategy` on the TPU
  named by `tpu` (a Cloud TPU name, a "grpc://host:8470" address, or
  None/"local" on a TPU VM; None uses `$TPU_NAME` when set). JAX: data
  parallel over `jax.devices("tpu")`. An unreachable "grpc://" address makes
  TensorFlow wait for it rather than fail.
- "data_parallel": JAX: `keras.distribution.DataParallel` over all devices
  of `keras.distribution.list_devices()` (all processes' devices after
  `keras.distribution.initialize()` in a multi-host JAX run). TensorFlow: the
  same as "mirrored".

Batches: the dataset given to `fit` is batched with the GLOBAL batch size.
Keras splits each global batch over the replicas itself (TensorFlow:
`strategy.experimental_distribute_dataset`; JAX: the batch is sharded over
the devices), so `global_batch_size` must be divisible by `num_replicas`
(`check_batch_size`). With "multi_worker", tf.data auto-sharding decides what
each worker reads: `AutoShardPolicy.DATA` gives every worker its share of
each global batch (the same global batches as one process would see), FILE
(AUTO's choice for datasets read from at least as many files as workers)
gives each worker its own files. A worker that builds only its own share
of every global batch gives `fit` `strategy.distribute_datasets_from_function`
(each input pipeline batched per replica: `InputContext
.get_per_replica_batch_size`), as the pre-training recipe's readers do; the
same dataset given with auto-sharding OFF is rebatched to global / replicas.

Losses: under TensorFlow strategies each replica's loss is the mean over its
own part of the batch (the MLM loss is normalised by that replica's number of
masked tokens), divided by the replica count, and the gradients are summed:
the gradient is the average of the replicas' mean-loss gradients, as in the
reference BERT TPU code. It equals the single-device gradient exactly when
every replica holds the same number of real masked tokens. JAX data
parallelism computes the loss over the whole global batch. Keras 3.15's
TensorFlow optimizer applies `global_clipnorm` to each replica's gradient
before the all-reduce (tests/training/test_distribute.py shows it).

XLA: Keras cannot `jit_compile` a TensorFlow step over several replicas;
pass `distribution.resolve_jit_compile(requested)` to `compile`.

JAX: `keras.backend.clear_session()` also clears the global distribution;
call `make_distribution` after it.
"""

import contextlib
import json
import logging
import numbers
import os

import keras

from bertzoo.errors import BertzooError
from bertzoo.training.runs import STRATEGIES  # noqa: F401  (the choices made here)

logger = logging.getLogger(__name__)


class DistributionError(BertzooError, RuntimeError, ValueError):
    """A strategy cannot be set up here (bad cluster/TPU settings, an
    unsupported backend)."""


class Distribution:
    """What `make_distribution` returns.

    Attributes:
        name: the requested strategy name.
        backend: the Keras backend.
        strategy: the `tf.distribute.Strategy` (TensorFlow), else None.
        distribution: the global `keras.distribution.Distribution` (JAX),
            else None.
        num_replicas: devices each global batch is split over (all workers).
        num_workers: processes taking part (1 unless multi-worker/host).
        worker_index: this process's index among them.
        is_chief: whether this process writes the outputs (checkpoints,
            logs, presets).
    """

    def __init__(
        self,
        name,
        backend,
        strategy=None,
        distribution=None,
        num_replicas=1,
        num_workers=1,
        worker_index=0,
        is_chief=True,
    ):
        self.name = name
        self.backend = backend
        self.strategy = strategy
        self.distribution = distribution
        self.num_replicas = int(num_replicas)
        self.num_workers = int(num_workers)
        self.worker_index = int(worker_index)
        self.is_chief = bool(is_chief)

    def scope(self):
        """Context in which to build the model and the optimizer and to
        call `compile` (TensorFlow: `strategy.scope()`; elsewhere a no-op,
        as `make_distribution` has set the JAX distribution globally)."""
        if self.strategy is not None:
            return self.strategy.scope()
        return contextlib.nullcontext()

    def check_batch_size(self, global_batch_size):
        """Raises ValueError unless the global batch splits evenly over the
        replicas."""
        if (
            isinstance(global_batch_size, bool)
            or not isinstance(global_batch_size, numbers.Integral)
            or global_batch_size < 1
        ):
            raise ValueError(
                f"The global batch size must be a positive integer, got {global_batch_size!r}."
            )
        if global_batch_size % self.num_replicas:
            raise ValueError(
                f"The global batch size {global_batch_size} does not split over the "
                f"{self.num_replicas} replicas of strategy {self.name!r}; use a multiple "
                f"of {self.num_replicas} (each replica gets global_batch_size / "
                f"{self.num_replicas} examples)."
            )

    def resolve_jit_compile(self, requested=True):
        """The `jit_compile` to pass to `compile`: `requested`, except False
        where XLA cannot compile Keras' training step under this strategy.

        Keras 3 (TensorFlow backend) compiles the whole `strategy.run` of a
        step as one XLA cluster, so with several replicas XLA fails: under
        MirroredStrategy the replicas' variables live on other devices
        ("Trying to access resource ... located in device CPU:1 from device
        CPU:0", an XLA known issue), and under MultiWorkerMirroredStrategy the
        all-reduce is a collective that XLA does not implement for CPUs. TPUs
        always compile with XLA, so `jit_compile` is not needed there. JAX
        always compiles (and shards) the step.

        `requested=None` picks by measurement (BENCHMARKS.md,
        `benchmarks/train_step.py`): XLA on GPUs, not on CPUs, where one
        trace serves every batch length of length-aware batching instead of
        one XLA compilation per bucket (2.4 s more for the MiniLM step's
        first call), for steps XLA runs 4% faster in float32 (0.242 vs 0.251 s
        per 32 x 32 batch) and 16% slower in bfloat16 (0.255 vs 0.221 s:
        XLA:CPU does not use the bf16 instructions).
        """
        if requested is None:
            if self.backend != "tensorflow":
                return True
            import tensorflow as tf

            requested = bool(tf.config.list_logical_devices("GPU")) and self.name != "tpu"
            if not requested:
                return False
        if not requested or self.backend != "tensorflow":
            return bool(requested)
        if self.name == "tpu" or self.num_replicas > 1:
            logger.warning(
                "jit_compile=True is not supported by Keras with the TensorFlow "
                "strategy %r over %d replicas; compiling without XLA.",
                self.name,
                self.num_replicas,
            )
            return False
        return True

    def __repr__(self):
        return (
            f"Distribution(name={self.name!r}, backend={self.backend!r}, "
            f"num_replicas={self.num_replicas}, num_workers={self.num_workers}, "
            f"worker_index={self.worker_index}, is_chief={self.is_chief})"
        )


def make_distribution(name="default", tpu=None):
    """Sets up the strategy `name` (one of `STRATEGIES`) for the current
    Keras backend and returns its `Distribution`.

    Args:
        name: "default", "mirrored", "multi_worker", "tpu" or
            "data_parallel" (see the module docstring).
        tpu: for "tpu" on TensorFlow: a Cloud TPU name, a "grpc://"
            address, or None/"local" for the TPU of a TPU VM.

    On JAX this sets (or, for "default", clears) the global
    `keras.distribution` distribution, replacing any earlier one.
    """
    key = str(name).lower()
    if key not in STRATEGIES:
        raise ValueError(f"Unknown distribution strategy {name!r}. Valid: {', '.join(STRATEGIES)}.")
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _tensorflow(key, tpu)
    if backend == "jax":
        return _jax(key)
    if key != "default":
        raise DistributionError(
            f"Strategy {key!r} is not supported on the {backend!r} backend; use "
            "KERAS_BACKEND=tensorflow or jax, or strategy 'default'."
        )
    return Distribution(key, backend)


# === TensorFlow ===

_TF_CONFIG_HELP = (
    'TF_CONFIG must hold JSON like {"cluster": {"worker": ["host1:port", "host2:port"]}, '
    '"task": {"type": "worker", "index": 0}} (optionally with a "chief" job), '
    "with this process's own task."
)


def _read_tf_config():
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise DistributionError(
            f"Strategy 'multi_worker' needs the TF_CONFIG environment variable. {_TF_CONFIG_HELP}"
        )
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as e:
        raise DistributionError(f"TF_CONFIG is not valid JSON ({e}). {_TF_CONFIG_HELP}") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not (cluster.get("worker") or cluster.get("chief")):
        raise DistributionError(
            f"TF_CONFIG has no cluster with a 'worker' (or 'chief') job. {_TF_CONFIG_HELP}"
        )
    if (
        not isinstance(task, dict)
        or task.get("type") not in cluster
        or not isinstance(task.get("index"), int)
    ):
        raise DistributionError(
            f"TF_CONFIG's task {task!r} does not name a job of its cluster ({sorted(cluster)}) "
            f"with an integer index. {_TF_CONFIG_HELP}"
        )
    if not 0 <= task["index"] < len(cluster[task["type"]]):
        raise DistributionError(
            f"TF_CONFIG's task index {task['index']} is out of range for the "
            f"{len(cluster[task['type']])} '{task['type']}' addresses. {_TF_CONFIG_HELP}"
        )
    return cluster, task


def _tensorflow(key, tpu):
    import tensorflow as tf

    if key == "default":
        strategy = tf.distribute.get_strategy()
        return Distribution(
            key, "tensorflow", strategy=strategy, num_replicas=strategy.num_replicas_in_sync
        )

    if key in ("mirrored", "data_parallel"):
        # MirroredStrategy() alone uses every GPU but only CPU:0 on a machine
        # without GPUs: name the CPU devices so logical CPUs are used too.
        devices = [d.name for d in tf.config.list_logical_devices("GPU")]
        devices = devices or [d.name for d in tf.config.list_logical_devices("CPU")]
        strategy = tf.distribute.MirroredStrategy(devices=devices)
        return Distribution(
            key, "tensorflow", strategy=strategy, num_replicas=strategy.num_replicas_in_sync
        )

    if key == "multi_worker":
        cluster, task = _read_tf_config()
        try:
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
        except RuntimeError as e:
            if "program startup" not in str(e):
                raise
            raise DistributionError(
                "Strategy 'multi_worker' must be set up before any TensorFlow op runs "
                "(collective ops are configured at program startup): call "
                "make_distribution first thing in the program."
            ) from e
        _patch_keras_for_multi_worker()
        jobs = [job for job in ("chief", "worker") if cluster.get(job)]
        offsets = {"chief": 0, "worker": len(cluster.get("chief") or ())}
        num_workers = sum(len(cluster[job]) for job in jobs)
        worker_index = offsets.get(task["type"], 0) + task["index"]
        is_chief = task["type"] == "chief" or (
            "chief" not in jobs and task["type"] == "worker" and task["index"] == 0
        )
        return Distribution(
            key,
            "tensorflow",
            strategy=strategy,
            num_replicas=strategy.num_replicas_in_sync,
            num_workers=num_workers,
            worker_index=worker_index,
            is_chief=is_chief,
        )

    # key == "tpu"
    if tpu is None:
        tpu = None if os.environ.get("TPU_NAME") else "local"
    asked = f"tpu={tpu!r}" if tpu is not None else f"$TPU_NAME={os.environ['TPU_NAME']!r}"
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    except Exception as e:
        raise DistributionError(
            f"Could not set up the TPU ({asked}): {type(e).__name__}: {e}. Name the TPU "
            "with --tpu: a Cloud TPU name (a TPU node in this project/zone), a "
            "'grpc://host:8470' address, or 'local' on a TPU VM."
        ) from e
    return Distribution(
        key, "tensorflow", strategy=strategy, num_replicas=strategy.num_replicas_in_sync
    )


def _patch_keras_for_multi_worker():
    """Works around two Keras 3.15 bugs that make `fit` fail under a
    multi-worker `MultiWorkerMirroredStrategy` (keras-team/keras#20329,
    #20585, tensorflow/tensorflow#72388). Installed once, by
    `make_distribution("multi_worker")`; other strategies behave as before.

    1. `fit` first takes one distributed batch to build the metrics and the
       optimizer (`_maybe_symbolic_build`) and reduces it across workers with
       `strategy.reduce`, which cannot reduce a nested (dict/tuple) batch in
       multi-worker mode ("Attempt to convert a value ({...PerReplica...})
       ... to a Tensor"). Only its shapes matter: this process's first local
       replica batch is used instead (no communication).
    2. The step's logs are reduced with `strategy.reduce("MEAN", v, axis=0)`,
       which fails on the scalar losses and metrics ("Invalid reduction
       dimension 0 for input with 0 dimensions"): scalars are averaged over
       the replicas with axis=None (what MirroredStrategy's path computes).
    """
    from keras.src import tree
    from keras.src.backend.tensorflow import trainer as tf_trainer

    if getattr(tf_trainer, "_bertzoo_multi_worker_patch", False):
        return
    needed = ("reduce_per_replica", "_collective_all_reduce_multi_worker")
    if not all(hasattr(tf_trainer, name) for name in needed) or not hasattr(
        tf_trainer.TensorFlowTrainer, "_maybe_symbolic_build"
    ):
        logger.warning(
            "This Keras (%s) differs from 3.15: multi-worker fit is not patched.", keras.__version__
        )
        return
    import tensorflow as tf

    original_build = tf_trainer.TensorFlowTrainer._maybe_symbolic_build
    original_reduce = tf_trainer.reduce_per_replica

    def _first_local(value, strategy):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if iterator is None or not tf_trainer._collective_all_reduce_multi_worker(strategy):
            return original_build(self, iterator=iterator, data_batch=data_batch)
        for _, _, it in iterator:
            data_batch = tree.map_structure(lambda v: _first_local(v, strategy), next(it))
            break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def reduce_per_replica(values, strategy, reduction):
        if reduction not in ("auto", "mean") or not tf_trainer._collective_all_reduce_multi_worker(
            strategy
        ):
            return original_reduce(values, strategy, reduction)

        def _reduce(v):
            scalar = _first_local(v, strategy).shape.rank == 0
            return strategy.reduce("MEAN", v, axis=None if scalar else 0)

        return tree.map_structure(_reduce, values)

    tf_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    tf_trainer.reduce_per_replica = reduce_per_replica
    tf_trainer._bertzoo_multi_worker_patch = True


# === JAX ===


def _jax(key):
    import jax

    if key == "multi_worker":
        raise DistributionError(
            "Strategy 'multi_worker' is TensorFlow only. With JAX, call "
            "keras.distribution.initialize() in every process and use strategy "
            "'data_parallel' (it then spans all processes' devices)."
        )
    if key == "default":
        keras.distribution.set_distribution(None)
        return Distribution(key, "jax")
    if key == "tpu":
        try:
            devices = jax.devices("tpu")
        except RuntimeError as e:
            raise DistributionError(
                f"Strategy 'tpu' found no TPU devices for JAX ({e}). Run on a TPU VM "
                "with jax[tpu] installed, or use 'data_parallel'."
            ) from e
        if not devices:
            raise DistributionError("Strategy 'tpu' found no TPU devices for JAX.")
        device_names = keras.distribution.list_devices("tpu")
    else:  # "data_parallel", "mirrored"
        device_names = keras.distribution.list_devices()
    distribution = keras.distribution.DataParallel(devices=device_names)
    keras.distribution.set_distribution(distribution)
    return Distribution(
        key,
        "jax",
        distribution=distribution,
        num_replicas=len(device_names),
        num_workers=jax.process_count(),
        worker_index=jax.process_index(),
        is_chief=jax.process_index() == 0,
    )
