"""ElectraPretrainer: the generator reads the discriminator's embeddings,
samples replace the masked tokens, the discriminator labels replaced
tokens, ELECTRA's loss and metrics, training with fit, saving both models."""

import keras
import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo.models.electra import ElectraPretrainer, electra_batch
from tests.models.test_pretrainer import make_batch, softmax_ce

V, E, H = 53, 6, 12  # vocabulary, embedding width, discriminator width


def discriminator(**overrides):
    config = dict(
        vocabulary_size=V,
        num_layers=2,
        num_heads=3,
        hidden_dim=H,
        intermediate_dim=20,
        embedding_dim=E,
        use_pooler=False,
        activation="gelu",
        max_sequence_length=16,
        dropout=0.0,
    )
    config.update(overrides)
    return bertzoo.BertBackbone(**config)


def electra_inputs(seed=0, batch=3, seq=9, preds=4):
    x, y, w = make_batch(batch=batch, seq=seq, preds=preds, vocab=V, seed=seed)
    return electra_batch(x, y, w)


def model_with_argmax_sampling(**kwargs):
    disc = discriminator()
    gen = ElectraPretrainer.generator_for(disc, 0.5)
    # A tiny temperature makes the Gumbel-max sample the generator's argmax.
    return ElectraPretrainer(gen, disc, temperature=1e-6, seed=3, **kwargs)


def test_generator_for_follows_the_paper_sizes():
    small = discriminator(hidden_dim=256, num_heads=4, intermediate_dim=1024, embedding_dim=128)
    gen = ElectraPretrainer.generator_for(small, 0.25)
    # The paper's ELECTRA-Small generator: 1/4 of width, FFN and heads.
    assert (gen.hidden_dim, gen.num_heads, gen.intermediate_dim) == (64, 1, 256)
    assert (gen.embedding_dim, gen.num_layers, gen.vocabulary_size) == (128, 2, V)
    with pytest.raises(ValueError, match="size must be in"):
        ElectraPretrainer.generator_for(small, 1.5)


def test_outputs_wire_generator_samples_into_the_discriminator():
    model = model_with_argmax_sampling()
    x = electra_inputs()
    # Make the generator's guess right at the first masked slot of each row
    # (the originals do not change what it sees), so both labels occur.
    x["mask_ids"][:, 0] = ops.convert_to_numpy(model(x)["mlm"]).argmax(-1)[:, 0]
    out = {k: ops.convert_to_numpy(v) for k, v in model(x).items()}
    positions, originals = x["mask_positions"], x["mask_ids"]
    weights = x["mask_weights"]
    sampled = out["mlm"].argmax(-1)  # (B, P): the argmax sample

    # The corrupted input: originals replaced by the samples at real masked
    # positions; labels 1 exactly where the sample differs from the original.
    corrupted = x["token_ids"].copy()
    expected_labels = np.zeros(corrupted.shape, "float32")
    for b in range(corrupted.shape[0]):
        for p in range(positions.shape[1]):
            if weights[b, p] > 0:
                corrupted[b, positions[b, p]] = sampled[b, p]
                expected_labels[b, positions[b, p]] = float(sampled[b, p] != originals[b, p])
    np.testing.assert_array_equal(out["rtd_labels"], expected_labels)
    assert 0 < expected_labels.sum() < weights.sum()  # both kinds occur

    # The discriminator logits: its head on the discriminator run on the
    # corrupted ids (Dense(H, gelu) -> Dense(1)).
    disc_in = {k: x[k] for k in ("segment_ids", "padding_mask")}
    disc_in["token_ids"] = corrupted
    hidden = ops.convert_to_numpy(model.discriminator(disc_in)["sequence_output"])
    k1, b1 = (ops.convert_to_numpy(v) for v in model.rtd_dense.weights)
    k2, b2 = (ops.convert_to_numpy(v) for v in model.rtd_output.weights)
    h = hidden @ k1 + b1
    h = ops.convert_to_numpy(keras.activations.gelu(h, approximate=False))
    np.testing.assert_allclose(out["rtd"], (h @ k2 + b2)[..., 0], atol=2e-5)
    np.testing.assert_array_equal(out["rtd_weights"], x["padding_mask"])


def test_generator_reads_the_discriminators_embeddings():
    model = model_with_argmax_sampling()
    x = electra_inputs(seed=1)
    disc_emb = model.discriminator.embeddings_layer
    disc_emb.token_embedding.embeddings.assign(
        np.random.default_rng(0).normal(size=(V, E)).astype("float32")
    )
    logits = ops.convert_to_numpy(model(x)["mlm"])
    gen = model.generator
    # Before syncing, the generator alone (its own tables) differs ...
    alone = {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    own = model.mlm_head(gen(alone)["sequence_output"], x["mask_positions"])
    assert np.abs(ops.convert_to_numpy(own) - logits).max() > 1e-3
    # ... after it, the saved generator is the model that was trained.
    model.sync_generator_embeddings()
    same = model.mlm_head(gen(alone)["sequence_output"], x["mask_positions"])
    np.testing.assert_allclose(ops.convert_to_numpy(same), logits, atol=1e-5)
    # One token table is trained (the discriminator's); the generator's
    # own copies are not trainable.
    tables = [v for v in model.trainable_variables if tuple(v.shape) == (V, E)]
    assert len(tables) == 1 and tables[0] is disc_emb.token_embedding.embeddings


def test_loss_is_mlm_plus_lambda_rtd():
    model = model_with_argmax_sampling(rtd_weight=50.0)
    x = electra_inputs(seed=2)
    out = model(x)
    loss = float(ops.convert_to_numpy(model.compute_loss(x, None, out)))
    o = {k: ops.convert_to_numpy(v).astype("float64") for k, v in out.items()}
    w = x["mask_weights"]
    mlm = (softmax_ce(o["mlm"], x["mask_ids"]) * w).sum() / (w.sum() + 1e-5)
    z, t, m = o["rtd"], o["rtd_labels"], o["rtd_weights"]
    bce = np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z)))
    rtd = (bce * m).sum() / (m.sum() + 1e-6)
    np.testing.assert_allclose(loss, mlm + 50.0 * rtd, rtol=1e-5)


def test_fit_learns_and_reports_rtd_metrics(tmp_path):
    disc = discriminator()
    model = ElectraPretrainer(ElectraPretrainer.generator_for(disc, 0.5), disc, seed=0)
    x = electra_inputs(seed=3, batch=6)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(x, batch_size=6, epochs=40, verbose=0).history
    names = {
        "loss",
        "mlm_loss",
        "rtd_loss",
        "masked_lm_accuracy",
        "rtd_accuracy",
        "rtd_precision",
        "rtd_recall",
    }
    assert names <= set(history)
    # Memorising one batch, 40 steps. Measured over initialisations (the
    # JAX pass's depends on the tests run before): mlm loss 3.97 -> 2.46-2.47,
    # rtd loss 0.69 -> 0.14-0.40, generator accuracy 0 -> 0.28-0.39.
    print({k: (round(v[0], 3), round(v[-1], 3)) for k, v in history.items()})
    assert history["mlm_loss"][-1] < history["mlm_loss"][0] - 1.0
    assert history["rtd_loss"][-1] < history["rtd_loss"][0] - 0.2
    assert history["masked_lm_accuracy"][-1] > 0.15

    # Saved: the discriminator at the preset, the generator in generator/;
    # a pretrainer built from the two presets is the same model.
    out = tmp_path / "preset"
    model.save_to_preset(out)
    assert (out / "generator" / "config.json").is_file()
    disc2 = bertzoo.BertBackbone.from_preset(out)
    gen2 = bertzoo.BertBackbone.from_preset(out / "generator")
    assert disc2.preset_info["metadata"]["model_type"] == "electra"
    reloaded = ElectraPretrainer(gen2, disc2, seed=0)
    assert len(reloaded.head_weights_loaded) == 9
    for a, b in zip(model.generator.weights, gen2.weights):
        np.testing.assert_array_equal(ops.convert_to_numpy(a), ops.convert_to_numpy(b))
    # Argmax sampling on both sides, so the corrupted inputs agree.
    model.temperature = reloaded.temperature = 1e-6
    first, second = model(x), reloaded(x)
    for key in ("mlm", "rtd", "rtd_labels"):
        np.testing.assert_allclose(
            ops.convert_to_numpy(first[key]), ops.convert_to_numpy(second[key]), atol=1e-5
        )


def test_mismatched_generator_or_a_pooler_is_refused():
    disc = discriminator()
    with pytest.raises(ValueError, match="embedding_dim 8 != 6"):
        ElectraPretrainer(discriminator(embedding_dim=8, hidden_dim=12), disc)
    with pytest.raises(ValueError, match="no pooler"):
        ElectraPretrainer(discriminator(), discriminator(use_pooler=True))
    with pytest.raises(ValueError, match="rtd_weight"):
        ElectraPretrainer(discriminator(), disc, rtd_weight=0)


def test_mixed_bfloat16_trains_with_float32_outputs():
    disc = discriminator(dtype="mixed_bfloat16")
    gen = ElectraPretrainer.generator_for(disc, 0.5)
    model = ElectraPretrainer(gen, disc, seed=0)
    x = electra_inputs(seed=4)
    out = model(x)
    assert {keras.backend.standardize_dtype(v.dtype) for v in out.values()} == {"float32"}
    # bfloat16 was used, not only asked for: every layer of both encoders
    # computes in bfloat16 on float32 variables, and their hidden states
    # come out in bfloat16 (float32 ones would mean the policy was dropped).
    features = {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    for encoder in (gen, disc):
        layers = [encoder, *encoder._flatten_layers(include_self=False)]
        computing = [layer for layer in layers if layer.weights]
        assert len(computing) > 10
        for layer in computing:
            assert (layer.compute_dtype, layer.variable_dtype) == ("bfloat16", "float32"), (
                encoder.name,
                layer.name,
                layer.dtype_policy.name,
            )
        hidden = encoder(features)["sequence_output"]
        assert keras.backend.standardize_dtype(hidden.dtype) == "bfloat16", encoder.name
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(x, batch_size=3, epochs=5, verbose=0).history
    assert np.isfinite(history["loss"]).all()
    assert history["loss"][-1] < history["loss"][0]
