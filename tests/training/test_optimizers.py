"""AdamW / LAMB exclusions and updates, the warmup-linear schedule, the
factory, gradient accumulation and mixed precision."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bertzoo.models.pretrainer import BertPretrainer
from bertzoo.training import AdamW, Lamb, WarmupLinearDecay, make_optimizer, uses_weight_decay
from tests.conftest import tiny_backbone

n = keras.ops.convert_to_numpy


def _batch(batch, seq=9, preds=3, vocab=61, seed=0):
    rng = np.random.default_rng(seed)
    x = {
        "token_ids": rng.integers(5, vocab, (batch, seq)).astype("int32"),
        "segment_ids": np.zeros((batch, seq), "int32"),
        "padding_mask": np.ones((batch, seq), "int32"),
        "mask_positions": rng.integers(1, seq, (batch, preds)).astype("int32"),
    }
    y = {
        "mlm": rng.integers(5, vocab, (batch, preds)).astype("int32"),
        "sentence": rng.integers(0, 2, (batch,)).astype("int32"),
    }
    return x, y, {"mlm": np.ones((batch, preds), "float32")}


def test_weight_decay_exclusions_on_a_real_pretrainer():
    model = BertPretrainer(tiny_backbone(num_layers=2, embedding_dim=6), objective="nsp")
    excluded = sorted(v.path for v in model.trainable_weights if not uses_weight_decay(v))
    decayed = sorted(v.path for v in model.trainable_weights if uses_weight_decay(v))
    # Every LayerNorm gamma/beta and every bias is excluded, nothing else.
    for path in excluded:
        assert path.endswith(("/bias", "/gamma", "/beta")), path
    for path in decayed:
        assert path.endswith(("/kernel", "/embeddings", "/position_embeddings")), path
    assert "mlm_head/bias" in excluded
    assert "mlm_head/layer_norm/gamma" in excluded
    assert "embeddings/layer_norm/beta" in excluded
    assert "transformer_layer_0/attention_layer_norm/gamma" in excluded
    assert "embeddings/token_embedding/embeddings" in decayed
    assert "mlm_head/transform_dense/kernel" in decayed
    n_ln = 2 * (1 + 2 * 2 + 1)  # embeddings, 2 per block, head
    n_bias = sum(1 for v in model.trainable_weights if v.path.endswith("/bias"))
    assert len(excluded) == n_ln + n_bias

    # With a zero gradient Adam's step is 0: only the decay moves weights.
    opt = AdamW(learning_rate=0.1, weight_decay=0.5)
    before = [n(v) for v in model.trainable_weights]
    opt.apply([keras.ops.zeros(v.shape) for v in model.trainable_weights], model.trainable_weights)
    for v, b in zip(model.trainable_weights, before):
        expected = b * (1 - 0.1 * 0.5) if uses_weight_decay(v) else b
        np.testing.assert_allclose(n(v), expected, rtol=1e-6, err_msg=v.path)


def _numpy_lamb(w, grads, lr, b1, b2, eps, wd, decay, adapt):
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        r = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        if decay:
            r = r + wd * w
        ratio = 1.0
        if adapt:
            wn, rn = np.linalg.norm(w), np.linalg.norm(r)
            ratio = wn / rn if wn > 0 and rn > 0 else 1.0
        w = w - lr * ratio * r
    return w


def test_lamb_two_steps_match_numpy():
    dense = keras.layers.Dense(5, name="dense")
    dense.build((None, 4))
    rng = np.random.default_rng(0)
    dense.kernel.assign(rng.normal(size=(4, 5)))
    dense.bias.assign(rng.normal(size=(5,)))
    w0 = [n(dense.kernel), n(dense.bias)]
    grads = [[rng.normal(size=w.shape).astype("float32") for w in w0] for _ in range(2)]
    opt = Lamb(learning_rate=0.05, weight_decay=0.1, epsilon=1e-6)
    for g in grads:
        opt.apply(g, [dense.kernel, dense.bias])
    # kernel: decayed and layer-adapted; bias: neither (the reference exclusions).
    k = _numpy_lamb(w0[0], [g[0] for g in grads], 0.05, 0.9, 0.999, 1e-6, 0.1, True, True)
    b = _numpy_lamb(w0[1], [g[1] for g in grads], 0.05, 0.9, 0.999, 1e-6, 0.1, False, False)
    np.testing.assert_allclose(n(dense.kernel), k, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n(dense.bias), b, rtol=1e-5, atol=1e-6)
    clone = Lamb.from_config(opt.get_config())
    assert clone.lamb_weight_decay == 0.1 and clone.exclusions == opt.exclusions


def test_warmup_linear_decay_values():
    ref = WarmupLinearDecay(1e-3, warmup_steps=100, total_steps=1000)
    hf = WarmupLinearDecay(1e-3, warmup_steps=100, total_steps=1000, continuous=True)
    cases = {
        0: (0.0, 0.0),
        50: (5e-4, 5e-4),
        99: (9.9e-4, 9.9e-4),
        100: (9e-4, 1e-3),
        550: (4.5e-4, 5e-4),
        1000: (0.0, 0.0),
        1500: (0.0, 0.0),
    }
    for step, (r, h) in cases.items():
        np.testing.assert_allclose(float(ref(step)), r, atol=1e-9, err_msg=str(step))
        np.testing.assert_allclose(float(hf(step)), h, atol=1e-9, err_msg=str(step))
    # Counting updates under gradient accumulation.
    acc = WarmupLinearDecay(1e-3, 100, 1000, micro_steps=4)
    assert float(acc(4 * 50 + 3)) == pytest.approx(float(ref(50)))
    restored = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(hf))
    assert isinstance(restored, WarmupLinearDecay) and restored.get_config() == hf.get_config()
    with pytest.raises(ValueError):
        WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=5)


def test_make_optimizer_factory():
    opt = make_optimizer("adamw", 1e-4, total_steps=1000, warmup_steps=10)
    assert isinstance(opt, AdamW)
    assert opt.global_clipnorm == 1.0 and opt.epsilon == 1e-6 and opt.weight_decay == 0.01
    lamb = make_optimizer("LAMB", 1.76e-3, 100, 10, gradient_accumulation_steps=2)
    assert isinstance(lamb, Lamb) and lamb.gradient_accumulation_steps == 2
    assert lamb._learning_rate.micro_steps == 2
    scaled = make_optimizer("adamw", 1e-4, 100, loss_scaling=True)
    assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)
    with pytest.raises(ValueError, match="adamw, lamb"):
        make_optimizer("sgd", 1e-4, 100)


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_gradient_accumulation_matches_one_big_batch(name):
    """2 updates from 2 accumulated micro-batches of 4 == 2 updates on the
    batches of 8 (equal MLM weight sums per half, so the per-micro-batch loss
    normalisation averages to the big batch's). The schedule (warmup 1 of 10
    updates) must count updates, not micro-batches; clipping and weight decay
    act on the averaged gradient. epsilon=0.1 keeps Adam's first steps
    near-linear in the gradient: with 1e-6 they amplify float32 rounding in
    near-zero gradients into full-size steps of either sign. On TF the big
    batch's embedding gradients are IndexedSlices with repeated ids, which
    the optimizers densify (see test_indexed_slices_gradients_match_dense);
    the accumulated path is dense already. Tolerance: the weight changes
    agree to 1e-3 of the largest change."""
    x, y, w = _batch(8)
    x2, y2, w2 = _batch(8, seed=1)
    halves = lambda t, i: {k: v[4 * i : 4 * i + 4] for k, v in t.items()}
    micro = [
        (halves(a, i), halves(b, i), halves(c, i))
        for a, b, c in ((x, y, w), (x2, y2, w2))
        for i in (0, 1)
    ]
    results = []
    for accumulate, batches in ((None, [(x, y, w), (x2, y2, w2)]), (2, micro)):
        keras.utils.set_random_seed(7)
        model = BertPretrainer(tiny_backbone(num_layers=1), objective="nsp")
        opt = make_optimizer(
            name,
            0.1,
            total_steps=10,
            warmup_steps=1,
            epsilon=0.1,
            gradient_accumulation_steps=accumulate,
            weight_decay=0.1,
        )
        init = [n(v) for v in model.trainable_weights]
        model.compile(optimizer=opt)
        for bx, by, bw in batches:
            model.train_on_batch(bx, by, sample_weight=bw)
        assert int(n(opt.iterations)) == 2
        results.append([n(v) - i for v, i in zip(model.trainable_weights, init)])
    largest = max(np.abs(d).max() for d in results[0])
    diffs = [np.abs(a - b).max() for a, b in zip(*results)]
    print(f"{name}: largest change {largest:.3g}, max difference {max(diffs):.3g}")
    assert largest > 1e-3
    assert max(diffs) <= 1e-3 * largest, max(diffs)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="IndexedSlices are TF-only")
@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_indexed_slices_gradients_match_dense(name):
    """An embedding gradient with a repeated row (IndexedSlices) must update
    like its dense sum: Keras' sparse-aware `ops.square` squares each slice,
    which would understate the clipping norm and the second moment."""
    rng = np.random.default_rng(0)
    values = rng.normal(size=(4, 3)).astype("float32")
    indices = np.array([0, 2, 0, 0], "int32")
    sparse = tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant([5, 3]))
    dense = tf.convert_to_tensor(sparse)
    results = []
    for grad in (sparse, dense):
        table = keras.Variable(np.full((5, 3), 0.5, "float32"), name="embeddings")
        opt = make_optimizer(name, 0.1, total_steps=10, epsilon=0.1, global_clipnorm=1.0)
        for _ in range(2):
            opt.apply([grad], [table])
        results.append(n(table))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6, atol=1e-7)
    assert np.abs(results[1] - 0.5).max() > 1e-3


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_step_is_finite(policy):
    if policy == "mixed_float16" and keras.backend.backend() == "jax":
        import jax

        if jax.default_backend() == "cpu":
            pytest.skip("XLA:CPU has no float16 dot_general (F16_F16_F32)")
    backbone = tiny_backbone(num_layers=1, dtype=policy)
    model = BertPretrainer(backbone, objective="nsp")
    opt = make_optimizer(
        "adamw", 1e-3, total_steps=10, warmup_steps=2, loss_scaling=policy == "mixed_float16"
    )
    model.compile(optimizer=opt)
    x, y, w = _batch(4)
    out = model(x)
    assert out["mlm"].dtype == "float32" and out["sentence"].dtype == "float32"
    assert backbone.token_embedding.embeddings.dtype == "float32"  # float32 master weights
    history = model.fit(
        tf.data.Dataset.from_tensors((x, y, w)).repeat(), steps_per_epoch=3, verbose=0
    ).history
    assert np.isfinite(history["loss"]).all()
    assert all(np.isfinite(n(v)).all() for v in model.trainable_weights)
