"""LoRA: enable_lora on backbones and task models trains only the adapters
(and a task model's head), saves merged as an ordinary preset, saves and
loads the adapter alone, and resumes exactly from a training checkpoint."""

import json
from pathlib import Path

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo.models import lora
from bertzoo.training import make_optimizer
from bertzoo.training.checkpoint import CheckpointManager, TrainingCheckpointError
from tests.conftest import reseal_manifest

TINY = dict(
    vocabulary_size=60,
    num_layers=2,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
    max_sequence_length=16,
    dropout=0.0,
)


def _data(n=16, length=8, seed=0):
    rng = np.random.default_rng(seed)
    x = {
        "token_ids": rng.integers(5, 60, (n, length)).astype("int32"),
        "segment_ids": np.zeros((n, length), "int32"),
        "padding_mask": np.ones((n, length), "int32"),
    }
    return x, (x["token_ids"][:, 1] % 3).astype("int32")


def _classifier(seed=1):
    keras.utils.set_random_seed(seed)
    return bertzoo.BertClassifier(bertzoo.BertBackbone(**TINY), num_classes=3, dropout=0.0)


def _compile(model):
    model.compile(optimizer=keras.optimizers.Adam(1e-2))


def test_only_the_adapters_and_the_head_train():
    model = _classifier()
    before = {v.path: np.array(v) for v in model.weights}
    trainable = model.enable_lora(rank=2)
    # The default, "all": 2 layers x (query, key, value, attention output:
    # 16 x 2 + 2 x 16 each; intermediate: 16 x 2 + 2 x 32; output: 32 x 2 +
    # 2 x 16), and the head.
    head = sum(int(np.prod(v.shape)) for v in lora._head_variables(model))
    assert trainable == 2 * (4 * (16 * 2 + 2 * 16) + 2 * (16 * 2 + 2 * 32)) + head
    # "attention": 2 layers x (query + value) x (16 x 2 + 2 x 16), and the head.
    assert _classifier().enable_lora(rank=2, targets="attention") == (
        2 * 2 * (16 * 2 + 2 * 16) + head
    )
    assert trainable == sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    x, y = _data()
    _compile(model)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    changed = {v.path for v in model.weights if v.path in before}
    changed = {p for p in changed if not np.array_equal(before[p], np.array(_by_path(model, p)))}
    adapters = {id(v) for v in lora.lora_variables(model)}
    head_paths = {v.path for v in lora._head_variables(model)}
    assert changed and changed <= head_paths  # no base weight moved
    assert all(np.any(np.array(v) != 0) for v in model.weights if id(v) in adapters)


def _by_path(model, path):
    return next(v for v in model.weights if v.path == path)


def test_merged_preset_adapter_and_errors(tmp_path):
    model = _classifier()
    base = tmp_path / "base"
    model.save_to_preset(base)
    model.enable_lora(rank=4, alpha=8)
    x, y = _data()
    _compile(model)
    model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    expected = model.predict(x, verbose=0)

    # Merged: an ordinary preset; a plain model gives the same outputs.
    model.save_to_preset(tmp_path / "merged")
    merged = bertzoo.BertClassifier.from_preset(tmp_path / "merged")
    assert not lora.lora_layers(merged)
    np.testing.assert_allclose(merged.predict(x, verbose=0), expected, atol=1e-5)

    # The adapter alone, loaded into the base model.
    model.save_lora_adapter(tmp_path / "adapter")
    document = json.loads((tmp_path / "adapter" / lora.ADAPTER_CONFIG).read_text())
    assert document["rank"] == 4 and document["alpha"] == 8.0
    assert document["targets"] == sorted(lora.TARGET_SETS["all"])
    fresh = bertzoo.BertClassifier.from_preset(base)
    fresh.load_lora_adapter(tmp_path / "adapter")
    np.testing.assert_allclose(fresh.predict(x, verbose=0), expected, atol=1e-5)
    assert (tmp_path / "adapter" / "bertzoo-manifest.json").is_file()

    # Another base: refused.
    other = _classifier(seed=7)
    with pytest.raises(lora.LoraError, match="other base weights"):
        other.load_lora_adapter(tmp_path / "adapter")
    # Another rank already enabled: refused, naming both.
    ranked = bertzoo.BertClassifier.from_preset(base)
    ranked.enable_lora(rank=2)
    with pytest.raises(lora.LoraError, match="'rank': 4.*'rank': 2"):
        ranked.load_lora_adapter(tmp_path / "adapter")
    # A damaged file: refused by its checksum.
    with open(tmp_path / "adapter" / lora.ADAPTER_FILE, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xff")
    with pytest.raises(lora.LoraError, match="lora_adapter.npz"):
        bertzoo.BertClassifier.from_preset(base).load_lora_adapter(tmp_path / "adapter")


def _one_line(error):
    message = str(error.value)
    assert "\n" not in message, message
    return message


@pytest.mark.backend_independent  # checks on files and settings before any factor exists
def test_hostile_adapters_are_refused_before_anything_is_allocated(tmp_path):
    import zipfile

    model = _classifier()
    base = tmp_path / "base"
    model.save_to_preset(base)
    model.enable_lora(rank=2)
    model.save_lora_adapter(tmp_path / "adapter")

    def copy(name):
        import shutil

        return Path(shutil.copytree(tmp_path / "adapter", tmp_path / name))

    # A rank of a million (factors that wide on every projection: over 6
    # GiB): refused by the projections' own rank, 16 here.
    ranked = copy("rank")
    document = json.loads((ranked / lora.ADAPTER_CONFIG).read_text())
    (ranked / lora.ADAPTER_CONFIG).write_text(json.dumps({**document, "rank": 1_000_000}))
    reseal_manifest(ranked)
    with pytest.raises(lora.LoraError) as error:
        bertzoo.BertClassifier.from_preset(base).load_lora_adapter(ranked)
    assert "rank 1,000,000 is above" in _one_line(error) and "at most 16" in str(error.value)
    # The same bound on the flag's path.
    with pytest.raises(lora.LoraError, match="rank 17 is above the rank"):
        _classifier().enable_lora(17)

    # A NaN or infinite alpha scales every output to NaN.
    for alpha in (float("nan"), float("inf")):
        with pytest.raises(lora.LoraError, match="alpha must be a finite number"):
            _classifier().enable_lora(2, alpha=alpha)

    # A small zip whose member inflates far past the array it claims to be
    # (here 64 MiB of zeros, a few KiB compressed): refused from the zip's
    # directory, before anything is inflated.
    bomb = copy("bomb")
    with zipfile.ZipFile(bomb / lora.ADAPTER_FILE) as archive:
        names = archive.namelist()
    with zipfile.ZipFile(bomb / lora.ADAPTER_FILE, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in names:
            archive.writestr(name, b"\0" * (64 << 20) if name == names[0] else b"")
    assert (bomb / lora.ADAPTER_FILE).stat().st_size < 1 << 20
    reseal_manifest(bomb)
    with pytest.raises(lora.LoraError) as error:
        bertzoo.BertClassifier.from_preset(base).load_lora_adapter(bomb)
    assert f"{names[0]} inflates to 67,108,864 bytes" in _one_line(error)

    # A member the model has no array for.
    extra = copy("extra")
    with zipfile.ZipFile(extra / lora.ADAPTER_FILE, "a") as archive:
        archive.writestr("surprise.npy", b"")
    reseal_manifest(extra)
    with pytest.raises(lora.LoraError, match="holds 'surprise.npy', not an array"):
        bertzoo.BertClassifier.from_preset(base).load_lora_adapter(extra)

    # NaN in an adapter array (consistent shapes and checksums).
    poisoned = copy("poisoned")
    with np.load(poisoned / lora.ADAPTER_FILE) as saved:
        arrays = {k: saved[k] for k in saved.files}
    first = sorted(arrays)[0]
    arrays[first] = np.full_like(arrays[first], np.nan)
    np.savez(poisoned / lora.ADAPTER_FILE, **arrays)
    reseal_manifest(poisoned)
    with pytest.raises(lora.LoraError) as error:
        bertzoo.BertClassifier.from_preset(base).load_lora_adapter(poisoned)
    assert f"adapter array {first} holds NaN" in _one_line(error)

    # The untouched adapter still loads.
    bertzoo.BertClassifier.from_preset(base).load_lora_adapter(tmp_path / "adapter")


def test_bad_settings_are_one_line_errors():
    model = _classifier()
    with pytest.raises(lora.LoraError, match="rank must be an integer >= 1"):
        model.enable_lora(0)
    with pytest.raises(
        lora.LoraError,
        match=r"match no Dense layer.*\['attention_output'.*named sets: all, attention",
    ):
        model.enable_lora(2, targets=("q_proj",))
    model.enable_lora(2)
    with pytest.raises(lora.LoraError, match="already enabled"):
        model.enable_lora(2)
    with pytest.raises(lora.LoraError, match="no LoRA adapters"):
        _classifier().save_lora_adapter("unused")


def test_backbone_lora_and_exact_resume(tmp_path):
    """A checkpoint keeps the frozen kernels and the factors (save_weights
    alone merges them and zeroes the factors on load, which would stop
    LoRA from training): the resumed run ends where an uninterrupted one
    does."""
    x, y = _data(32)

    def run(stop_after=None, resume=False):
        model = _classifier()
        model.enable_lora(rank=2)
        model.compile(optimizer=make_optimizer("adamw", 1e-2, total_steps=8))
        manager = CheckpointManager(tmp_path / "ckpt", keep=2)
        start = manager.restore(model)["step"] if resume else 0
        for step in range(start, 8):
            model.train_on_batch({k: v[step * 4 : step * 4 + 4] for k, v in x.items()}, y[:4])
            if stop_after is not None and step + 1 == stop_after:
                manager.save(model, step + 1)
                return model
        return model

    reference = run()
    run(stop_after=3)
    resumed = run(resume=True)
    for a, b in zip(reference.weights, resumed.weights, strict=True):
        np.testing.assert_allclose(np.array(a), np.array(b), atol=1e-6)
    assert (tmp_path / "ckpt" / "ckpt-000000003" / "lora.npz").is_file()
    # A LoRA-less model cannot resume a LoRA checkpoint silently, and back.
    plain = _classifier()
    plain.compile(optimizer=make_optimizer("adamw", 1e-2, total_steps=8))
    other = CheckpointManager(tmp_path / "plain", keep=1)
    plain.train_on_batch({k: v[:4] for k, v in x.items()}, y[:4])
    other.save(plain, 1)
    with_lora = _classifier()
    with_lora.enable_lora(rank=2)
    with_lora.compile(optimizer=make_optimizer("adamw", 1e-2, total_steps=8))
    with pytest.raises(TrainingCheckpointError, match="does not fit this model"):
        CheckpointManager(tmp_path / "plain", keep=1).restore(with_lora)


def test_backbone_alone_freezes_all_but_the_adapters():
    keras.utils.set_random_seed(0)
    backbone = bertzoo.BertBackbone(**TINY)
    assert backbone.enable_lora(rank=1, targets="query") == 2 * (16 + 16)
    assert {v.name for v in backbone.trainable_weights} == {"lora_kernel_a", "lora_kernel_b"}
