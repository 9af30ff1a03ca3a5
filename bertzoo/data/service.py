"""Pre-training input served by the tf.data service, for hosts whose CPUs
cannot keep their accelerators fed.

A dispatcher (one per job) hands out work; workers on CPU hosts run the
input pipeline (read, parse, mask, batch) and stream finished batches to
the trainers:

    python -m bertzoo data-service dispatcher --port 5050            # host d0
    python -m bertzoo data-service worker --dispatcher d0:5050       # each CPU host
    ds = records_dataset_via_service("/mnt/shared/records128", 256, 128, None, "d0:5050")

Only pure TensorFlow graphs can run on a worker: the dataset is sent to the
workers as a serialized graph, and a `from_generator`, `py_function` or
`numpy_function` inside it names a Python function that lives in the
trainer's process only. `distribute` refuses such a dataset. The
on-the-fly stream over prepared shards (`prepared_dataset`, built on
`from_generator`) is one: write masked TFRecords once with `python -m
bertzoo prepare-records` and read those. Workers read the files
themselves, so the paths must mean the same on every worker and trainer
(a shared mount).

Processing mode: "distributed_epoch" (dynamic sharding). The dispatcher
hands out the dataset's source one element ("split") at a time, in order,
to whichever worker asks, so each element of the source is processed by one
worker. "parallel_epochs" would run the whole dataset on every worker; as
bertzoo's pipelines are pure functions of their seed, N workers would then
serve N copies of the same stream.

`records_dataset_via_service` makes the split one file of one epoch (a
"unit"): unit u is file `perm_e(u mod F)` of epoch e = u // F, the file
order of epoch e a permutation keyed by (seed, e), as in the local reader.
What is guaranteed, with no worker lost:

- every epoch serves each record of the files exactly once (a finite
  stream, `repeat=False`, is exactly the records of one epoch);
- units are handed out in order, so epochs follow each other: at any time
  only the units being read (`cycle_length` per worker) and the records in
  the workers' shuffle buffers (`shuffle_buffer` each) and batch buffers
  are in flight;
- trainers that pass the same `job_name` share one job and receive
  disjoint batches (how several hosts of a multi-worker or TPU run split
  the data between them).

What is not: the order of the batches (each worker shuffles and batches
its own units; which worker's batch comes next depends on timing), and so
an exact resume. `start_batch=k` starts the stream at unit
floor(k * B * F / N) (N records in F files), where the uninterrupted stream
would be if every file held N / F records and no unit were in flight:
whole epochs are skipped exactly, within an epoch the position is the
file. Records of the units in flight at the interruption may be served
again or not at all in that epoch; every later epoch is complete. Local
reading (`read_pretraining_dataset`) stays the way to an exact resume.
A worker that dies loses the units it was reading (at most once, not
exactly once); a dispatcher started with a work directory and
`fault_tolerant=True` journals its state and resumes the job after a
restart.

Dynamic masking (files written unmasked, a masker given) masks each batch
with the seed pair (seed, a fingerprint of the batch's records and units),
so masks do not depend on which worker made the batch, and two workers
never mask with the same seeds.
"""

import re
import socket

import tensorflow as tf

from bertzoo.data import pipeline
from bertzoo.errors import BertzooError

DISTRIBUTED_EPOCH = "distributed_epoch"
PARALLEL_EPOCHS = "parallel_epochs"
PROCESSING_MODES = (DISTRIBUTED_EPOCH, PARALLEL_EPOCHS)
DEFAULT_PORT = 5050

# Ops that call back into the Python process that built the dataset.
_PYTHON_OPS = {"GeneratorDataset", "PyFunc", "PyFuncStateless", "EagerPyFunc"}
_ADDRESS = re.compile(
    r"(?:(?P<protocol>[A-Za-z][A-Za-z0-9+.-]*)://)?(?P<host>[^\s:/]+):(?P<port>\d+)"
)
_UNIT_SALT = 498247692  # a third seed word for the file permutations


class DataServiceError(BertzooError, ValueError):
    """A tf.data service address, setting or dataset that cannot work."""


def parse_address(address):
    """'grpc://HOST:PORT' or 'HOST:PORT' -> 'grpc://HOST:PORT'."""
    match = _ADDRESS.fullmatch(address) if isinstance(address, str) else None
    port = int(match["port"]) if match else 0
    if not match or (match["protocol"] or "grpc") != "grpc" or not 0 < port < 65536:
        raise DataServiceError(
            f"data service address {address!r} is not grpc://HOST:PORT or HOST:PORT with "
            "PORT in 1-65535 (e.g. grpc://dispatcher-0:5050)."
        )
    return f"grpc://{match['host']}:{port}"


def _check_port(port, what):
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise DataServiceError(
            f"{what} port must be an int in 0-65535 (0: any free port), got {port!r}."
        )
    return port


def python_ops(dataset):
    """The ops in `dataset`'s graph (its functions included) that call
    Python (sorted; empty when the service can run it)."""
    graph_bytes = dataset._as_serialized_graph(
        external_state_policy=tf.data.experimental.ExternalStatePolicy.IGNORE
    ).numpy()
    graph = tf.compat.v1.GraphDef.FromString(graph_bytes)
    ops = {node.op for node in graph.node}
    ops.update(node.op for function in graph.library.function for node in function.node_def)
    return sorted(ops & _PYTHON_OPS)


def check_service_dataset(dataset):
    """Raises `DataServiceError` if `dataset` calls Python (from_generator,
    py_function, numpy_function), which a service worker cannot run."""
    found = python_ops(dataset)
    if found:
        raise DataServiceError(
            f"this dataset calls Python ({', '.join(found)}: from_generator, py_function or "
            "numpy_function), which tf.data service workers cannot run (they receive the graph, "
            "not the Python process); write masked TFRecords with `python -m bertzoo "
            "prepare-records` and read those through the service (records_dataset_via_service)."
        )


def distribute(dataset, service, job_name=None, processing_mode=DISTRIBUTED_EPOCH):
    """`dataset` produced by the tf.data service at `service` (a dispatcher,
    'grpc://HOST:PORT' or 'HOST:PORT') instead of this process.

    Args:
        dataset: a pure-TensorFlow `tf.data.Dataset` (checked: see
            `check_service_dataset`).
        service: the dispatcher's address.
        job_name: consumers that pass the same name share one job and
            receive disjoint elements (the hosts of one multi-worker run);
            None: each iterator gets a job of its own.
        processing_mode: "distributed_epoch" (default; each element of the
            dataset's source is processed once, by one worker) or
            "parallel_epochs" (every worker runs the whole dataset; only for
            datasets that differ per worker, e.g. unseeded shuffling).

    The result's auto-sharding is off: the service already divides the work,
    and `tf.distribute` must not drop elements from each host's stream.
    """
    if processing_mode not in PROCESSING_MODES:
        raise DataServiceError(
            f"processing_mode must be one of {PROCESSING_MODES}, got {processing_mode!r}."
        )
    if job_name is not None and (not isinstance(job_name, str) or not job_name):
        raise DataServiceError(f"job_name must be a non-empty string or None, got {job_name!r}.")
    address = parse_address(service)
    check_service_dataset(dataset)
    served = dataset.apply(
        tf.data.experimental.service.distribute(processing_mode, address, job_name=job_name)
    )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return served.with_options(options)


def start_dispatcher(port=DEFAULT_PORT, work_dir=None, fault_tolerant=False):
    """Starts a dispatcher on `port` (0: a free one) and returns the
    `tf.data.experimental.service.DispatchServer` (`.join()` blocks,
    `.stop()` ends it). `work_dir` keeps its state; with `fault_tolerant`
    (needs `work_dir`) the state is journaled before every answer, so a
    restarted dispatcher resumes its jobs."""
    _check_port(port, "dispatcher")
    if fault_tolerant and not work_dir:
        raise DataServiceError("fault_tolerant=True needs a work_dir for the dispatcher's journal.")
    config = tf.data.experimental.service.DispatcherConfig(
        port=port,
        work_dir=None if work_dir is None else str(work_dir),
        fault_tolerant_mode=bool(fault_tolerant),
    )
    return tf.data.experimental.service.DispatchServer(config)


def start_worker(dispatcher_address, port=0, host=None):
    """Starts a worker of the dispatcher at `dispatcher_address` on `port`
    (0: a free one) and returns the `tf.data.experimental.service.WorkerServer`.
    `host`: the name trainers reach this worker by (default: this machine's
    fully qualified name; TensorFlow's own default, localhost, works only
    for trainers on this machine)."""
    address = parse_address(dispatcher_address)
    _check_port(port, "worker")
    host = host or socket.getfqdn()
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=address.removeprefix("grpc://"),
        worker_address=f"{host}:%port%",
        data_transfer_address=f"{host}:%dts_port%",
        port=port,
    )
    return tf.data.experimental.service.WorkerServer(config)


def _first_unit(start_batch, batch_size, num_records, num_files):
    """The unit where batch `start_batch` would begin if every file held
    the mean number of records."""
    if not start_batch:
        return 0
    if num_records <= 0:
        raise pipeline.PretrainingDataError("The files hold no records.")
    return start_batch * batch_size * num_files // num_records


def _content_key(serialized, units):
    """A batch's records and units -> int64, the second word of its masking
    seed pair."""
    text = tf.strings.reduce_join(serialized) + tf.strings.reduce_join(
        tf.strings.as_string(units), separator=","
    )
    return tf.bitcast(tf.fingerprint(text[None])[0], tf.int64)


def records_dataset_via_service(
    directory,
    batch_size,
    seq_len,
    masker,
    service,
    *,
    job_name=None,
    seed=0,
    shuffle=True,
    shuffle_buffer=10000,
    cycle_length=2,
    repeat=True,
    drop_remainder=True,
    start_batch=0,
    max_predictions_per_seq=None,
    vocabulary_size=None,
):
    """Pre-training TFRecords (a directory or shard glob, as
    `read_pretraining_dataset` reads) through the tf.data service: the same
    (x, y, sample_weight) batches with the same static shapes, made by the
    service's workers. The library call behind a `--data-service` flag.

    Args:
        directory, batch_size, seq_len, max_predictions_per_seq,
            vocabulary_size: as `read_pretraining_dataset`, with the same
            checks against the metadata.
        masker: None for masked files (`prepare-records`); the
            `MaskedLMMasker` for unmasked ones (dynamic masking).
        service: the dispatcher's address, 'grpc://HOST:PORT' or 'HOST:PORT'.
        job_name: the same name on every trainer host of one run, so the
            hosts receive disjoint batches (None: a job per iterator).
        seed, shuffle: the file order of each epoch and each worker's
            record shuffling (`shuffle_buffer` records).
        cycle_length: files a worker reads at a time.
        repeat: endless (the default, for training); False: one epoch.
        drop_remainder: with `repeat=False`, whether each worker drops its
            last partial batch (endless streams have none).
        start_batch: resume near this batch (see the module docstring:
            exact across epochs, to the file within one).
    """
    start_batch = pipeline._check_start_batch(start_batch)
    if cycle_length < 1:
        raise DataServiceError(f"cycle_length must be >= 1, got {cycle_length}.")
    files, meta = pipeline.checked_files(
        directory, seq_len, max_predictions_per_seq, masker, vocabulary_size
    )
    num_files = len(files)
    first = 0
    if start_batch:
        first = _first_unit(
            start_batch, batch_size, pipeline._count_records(files, meta), num_files
        )
    parse = pipeline.record_parser(meta, seq_len)
    objective = meta["objective"]
    names = tf.constant(files)
    seed64 = tf.constant(seed, tf.int64)
    last = tf.constant(num_files - 1, tf.int64)

    def unit_file(unit):
        epoch, index = unit // num_files, unit % num_files
        if shuffle:
            key = tf.stack([tf.constant(_UNIT_SALT, tf.int64), seed64, epoch])
            index = tf.raw_ops.RandomIndexShuffle(index=index, seed=key, max_index=last, rounds=4)
        return names[index], unit

    def read(name, unit):
        return tf.data.TFRecordDataset(name).map(lambda record: (record, unit))

    end = tf.int64.max if repeat else num_files
    ds = tf.data.Dataset.range(first, end).map(unit_file)
    ds = ds.interleave(
        read,
        cycle_length=min(cycle_length, num_files),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder or repeat)

    def to_batch(serialized, units):
        columns = parse(serialized)
        if meta["masked"]:
            return pipeline._format_static(columns, objective)
        pair = tf.stack([seed64, _content_key(serialized, units)])
        return pipeline._mask_batch(columns, masker, pair, objective)

    ds = ds.map(to_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return distribute(ds.prefetch(tf.data.AUTOTUNE), service, job_name, DISTRIBUTED_EPOCH)
