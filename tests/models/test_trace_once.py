"""`fit` on a dataset traces the train step once under TensorFlow: bertzoo
builds the optimizer and the compiled metrics before the first trace
(`bertzoo.models.pretrainer.build_before_tracing`). Without it, Keras
builds them inside that trace and TensorFlow traces the step a second time
to run it without creating variables."""

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo.models.pretrainer import BertPretrainer
from tests.conftest import tiny_backbone
from tests.models.test_pretrainer import make_batch

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="TensorFlow's tf.function tracing (JAX builds before tracing itself)",
)


def _count_traces(model):
    """Counts the train step's traces: Keras calls `train_step` from Python
    only while tracing its function."""
    traces = []
    step = model.train_step

    def counted(data):
        traces.append(1)
        return step(data)

    model.train_step = counted
    return traces


def _dataset(x, y, sample_weight=None):
    import tensorflow as tf

    parts = (x, y) if sample_weight is None else (x, y, sample_weight)
    return tf.data.Dataset.from_tensor_slices(parts).batch(4)


def _examples(seed, rows, length, classes):
    """Token-id inputs (the tiny backbone's vocabulary) and class labels."""
    rng = np.random.default_rng(seed)
    x = {
        "token_ids": rng.integers(5, 61, (rows, length)).astype("int32"),
        "segment_ids": np.zeros((rows, length), "int32"),
        "padding_mask": np.ones((rows, length), "int32"),
    }
    return x, rng.integers(0, classes, (rows,)).astype("int32")


def test_a_task_model_traces_its_step_once_and_trains_the_same():
    x, y = _examples(seed=0, rows=12, length=9, classes=3)
    losses = {}
    for prebuilt in (True, False):
        keras.utils.set_random_seed(3)
        model = bertzoo.BertClassifier(tiny_backbone(num_layers=1), num_classes=3, dropout=0.0)
        model.compile(optimizer=keras.optimizers.Adam(1e-2), metrics=["accuracy"])
        traces = _count_traces(model)
        if prebuilt:
            history = model.fit(_dataset(x, y), epochs=1, verbose=0)
            assert len(traces) == 1, f"the train step was traced {len(traces)} times"
        else:
            # Keras' own path (fit of the base class): built inside the trace.
            history = keras.Model.fit(model, _dataset(x, y), epochs=1, verbose=0, shuffle=False)
            assert len(traces) == 2, traces  # what build_before_tracing saves
        assert model.optimizer.built and model.optimizer.iterations.numpy() == 3
        losses[prebuilt] = history.history["loss"]
    # The same training either way: building first changes no number.
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-6)


def test_a_pretrainer_traces_its_step_once():
    model = BertPretrainer(tiny_backbone(num_layers=1), objective="nsp")
    model.compile(optimizer="adam")
    traces = _count_traces(model)
    x, y, w = make_batch(batch=8)
    model.fit(_dataset(x, y, w), epochs=1, verbose=0)
    assert len(traces) == 1, f"the train step was traced {len(traces)} times"
    assert model.optimizer.iterations.numpy() == 2


def test_in_memory_arrays_are_left_to_keras_and_a_built_model_to_itself():
    x, y = _examples(seed=1, rows=8, length=6, classes=2)
    model = bertzoo.BertClassifier(tiny_backbone(num_layers=1), num_classes=2)
    model.compile(optimizer="adam")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # Keras builds in its trace
    assert model.optimizer.built and model.optimizer.iterations.numpy() == 2
    variables = [v.path for v in model.optimizer.variables]
    model.fit(_dataset(x, y), epochs=1, verbose=0)  # already built: nothing rebuilt
    assert model.optimizer.iterations.numpy() == 4
    assert [v.path for v in model.optimizer.variables] == variables
