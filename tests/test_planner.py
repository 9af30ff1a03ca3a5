"""The memory and batch-size planner: exact parameter counts, the memory
parts, the largest batch, FLOPs against the reference's anchors, the
measured XLA peak (JAX pass), docs/planner.md's 12 GiB table, the command line,
and --batch-size auto in the recipes."""

import argparse
import contextlib
import io
import json
import re
from pathlib import Path

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo.cli import main
from bertzoo.planner import Architecture, parse_memory, plan
from bertzoo.planner.architecture import backbone_config
from bertzoo.training.finetune import FinetuneConfig, FinetuneError
from bertzoo.training.pretrain import PretrainConfig, PretrainError, _auto_batch_size
from bertzoo.training.runs import batch_size_flag, resolve_batch_size
from tests.conftest import tiny_backbone

# The planner's guide, whose figures these tests check.
PLANNER_PAGE = Path(__file__).resolve().parent.parent / "docs" / "planner.md"
GiB = 2**30


@pytest.mark.backend_independent  # arithmetic on the configs
@pytest.mark.parametrize("name", sorted(bertzoo.list_presets()))
def test_parameter_count_is_every_presets_exact_count(name):
    # The metadata counts are checked against count_params() and against
    # transformers in tests/models/test_backbone.py.
    assert Architecture.of(name).backbone_params() == bertzoo.list_presets()[name]["params"]


# ModernBERT's switches: pre-LN blocks without biases (LayerNorms without
# their bias), GeGLU (the first feed-forward projection twice as wide),
# rotary positions (no position table), local attention.
MODERNBERT = dict(
    hidden_dim=12,  # an even head size, for the rotation
    num_segments=0,
    use_pooler=False,
    norm_first=True,
    use_bias=False,
    gated_feedforward=True,
    rope_theta=160000.0,
    local_rope_theta=10000.0,
    local_attention_window=4,
    global_attention_every=2,
)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"embedding_dim": 8, "num_groups": 1},
        {"num_segments": 0, "use_pooler": False},
        MODERNBERT,
    ],
)
def test_parameter_count_of_built_models(overrides):
    backbone = tiny_backbone(**overrides)
    assert plan(backbone, seq_len=16, num_classes=3).parameters == (
        bertzoo.BertClassifier(backbone, num_classes=3).count_params()
    )
    objective = "nsp" if backbone.use_pooler else "none"
    pretrainer = bertzoo.BertPretrainer(backbone, objective=objective)
    assert plan(backbone, seq_len=16, mode="pretrain").parameters == pretrainer.count_params()


@pytest.mark.backend_independent  # counts, and FLOPs from the config
@pytest.mark.parametrize("name", ["modernbert_base", "modernbert_large", "ettin_encoder_17m"])
def test_modernbert_presets_counts_and_flops_are_the_built_models(name):
    """The planner's count of a ModernBERT preset is its built backbone's
    (the preset's metadata count, which is transformers' ModernBertModel's:
    tests/models/test_backbone.py), its blocks' count that of a built
    block; and its forward FLOPs are 2 x every Dense kernel a token goes
    through (the GeGLU's H -> 2F projection included) plus the attention
    products."""
    arch = Architecture.of(name)
    assert arch.gated_feedforward and not arch.use_bias and arch.norm_first
    assert arch.backbone_params() == bertzoo.list_presets()[name]["params"]
    # One block of the preset's widths, built (two layers: the first has no
    # attention LayerNorm, the second has): the full model is 22 or 28.
    config = {**backbone_config(name), "num_layers": 2, "vocabulary_size": 8}
    # Rotary positions: no position table, so the length sets no weight; the
    # local window may not be wider than it.
    config["max_sequence_length"] = config["local_attention_window"]
    built = bertzoo.BertBackbone(**config)
    small = Architecture.of(built)
    assert small.backbone_params() == built.count_params()
    second = built.get_layer("transformer_layer_1")
    assert second.count_params() == arch.block_params()
    kernels = sum(
        int(np.prod(layer.kernel.shape))
        for layer in second._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.Dense)
    )
    s, h = 128, arch.hidden_dim
    expected = s * arch.num_layers * (2 * kernels + 4 * s * h)
    assert plan(name, seq_len=s, mode="inference").flops_per_sequence == expected


@pytest.mark.backend_independent  # counts from the config alone
def test_local_layers_in_blocks_are_planned_as_they_compute():
    """Up to 256 tokens a local layer computes (and keeps) S x S scores, as
    a global one; beyond, S x 3b in blocks of b = window / 2 (queries padded
    to whole blocks), plus its key and value spans (3 S x H each); the
    planner's memory and FLOPs follow (ettin_encoder_17m: 7 layers, global
    0, 3 and 6; window 128; 4 heads, H 256)."""
    arch = Architecture.of("ettin_encoder_17m")
    assert arch.score_shapes(256) == [(256, 256, False)] * 7
    shapes = arch.score_shapes(1000)
    expected = [(1000, 1000, False), (1024, 192, True), (1000, 1000, False)]
    assert [shapes[i] for i in (0, 1, 3)] == expected
    global_only = {**backbone_config("ettin_encoder_17m"), "local_attention_window": None}
    s, h, heads, local = 1000, 256, 4, 4
    # Fused attention (no dropout): 3 float32 score tensors per layer.
    saved = local * (3 * 4 * heads * (s * s - 1024 * 192) - 6 * 4 * 1024 * h)
    for mode, factor in (("finetune", 3), ("inference", 1)):
        ours, everywhere = (
            plan(c, seq_len=s, mode=mode) for c in ("ettin_encoder_17m", global_only)
        )
        flops = factor * 4 * h * local * (s * s - 1024 * 192)
        assert everywhere.flops_per_sequence - ours.flops_per_sequence == flops
        if mode == "finetune":
            gap = everywhere.activation_bytes_per_sequence - ours.activation_bytes_per_sequence
            assert gap == saved


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="XLA memory analysis: JAX pass")
@pytest.mark.parametrize(
    "seq_len, batch, mode, dropout, bar",
    [
        (128, 8, "pretrain", 0.1, 0.03),
        (512, 8, "inference", 0.1, 0.03),
        (512, 8, "finetune", 0, 0.08),
    ],
)
def test_modernbert_plan_is_close_to_the_compiled_steps_peak(seq_len, batch, mode, dropout, bar):
    """A small ModernBERT-shaped config (F = 1.5 H, as the presets; a
    global layer, then a local one with a window of 16).

    With dropout (attention's too: the explicit path) the GeGLU's 2F-wide
    projection is kept for the backward pass (2 S x F tensors more than an
    ungated layer's 4) and is an inference step's working set. Measured
    (jax 0.10, CPU): -0.7% (pre-training, masked LM only: the step also
    takes segment_ids), -0.3%; without the GeGLU's tensors the training
    plan was 6.4% under.

    Without dropout, as the presets train, attention takes the fused op,
    which keeps 3 heads x S x S tensors (exponentials, their sums broadcast,
    probabilities), and at 512 tokens the local layer runs in blocks (S x
    3b scores, key and value spans): -6.9% here; -11% at 128 tokens and
    +8% to +34% at 512 when the planner counted 2 tensors and local layers
    as global ones. The whole grid: benchmarks/plan_calibration.py."""
    from bertzoo.planner import measure_peak

    config = {
        **backbone_config("modernbert_base"),
        "vocabulary_size": 1000,
        "num_layers": 2,
        "num_heads": 4,
        "hidden_dim": 128,
        "intermediate_dim": 192,
        "max_sequence_length": 1024,
        "local_attention_window": 16,
        "global_attention_every": 2,
        "dropout": dropout,
        "attention_dropout": None,
    }
    measured = measure_peak(config, seq_len, batch, mode, num_classes=3)
    predicted = plan(config, seq_len=seq_len, mode=mode, num_classes=3).peak_bytes(batch)
    assert abs(predicted / measured - 1) < bar, (predicted, measured)


@pytest.mark.backend_independent
def test_memory_parts_and_the_largest_batch():
    p = plan("bert_base", seq_len=512, memory="12GiB")
    n = p.parameters
    assert (p.weights_bytes, p.gradient_bytes, p.optimizer_bytes) == (4 * n, 4 * n, 8 * n)
    assert p.max_batch >= 1
    assert p.peak_bytes(p.max_batch) <= 12 * GiB < p.peak_bytes(p.max_batch + 1)
    # A larger device fits more; activations grow with length, faster than
    # linearly (the S x S attention tensors).
    assert plan("bert_base", seq_len=512, memory="80GiB").max_batch > 6 * p.max_batch
    a128 = plan("bert_base", seq_len=128).activation_bytes_per_sequence
    assert p.activation_bytes_per_sequence > 4 * a128

    accumulated = plan("bert_base", seq_len=512, memory="12GiB", gradient_accumulation=4)
    assert accumulated.optimizer_bytes == 12 * n  # + the float32 accumulator
    assert accumulated.max_batch == 4 * accumulated.max_micro_batch
    assert accumulated.max_micro_batch <= p.max_micro_batch

    mixed = plan("bert_base", seq_len=512, memory="12GiB", precision="mixed_bfloat16")
    assert mixed.weights_bytes == 6 * n  # float32 variables + their 16-bit copies
    assert mixed.activation_bytes_per_sequence < 0.75 * p.activation_bytes_per_sequence
    flash = plan("bert_base", seq_len=512, memory="12GiB", attention="flash")
    assert flash.max_batch > p.max_batch

    inference = plan("bert_base", seq_len=512, memory="12GiB", mode="inference")
    assert (inference.gradient_bytes, inference.optimizer_bytes) == (0, 0)
    assert inference.max_batch > 10 * p.max_batch

    too_small = plan("bert_base", seq_len=512, memory="1GiB")
    assert too_small.max_batch == 0 and "0: one sequence needs" in too_small.table()


@pytest.mark.backend_independent
def test_flops_match_the_reference_anchors():
    # REFERENCE.md: BERT-base inference 22.35 GFLOP per 128-token sequence;
    # training with a masked-only MLM head 545 MFLOP per token (s128).
    inference = plan("bert_base", seq_len=128, mode="inference")
    assert inference.flops_per_sequence == pytest.approx(22.35e9, rel=0.005)
    pretrain = plan("bert_base", seq_len=128, mode="pretrain", tflops=100, utilisation=0.5)
    assert pretrain.flops_per_sequence / 128 == pytest.approx(545e6, rel=0.005)
    assert pretrain.seconds_per_step(64) == pytest.approx(
        64 * pretrain.flops_per_sequence / (100e12 * 0.5)
    )
    assert plan("bert_base", seq_len=128).seconds_per_step() is None


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="XLA memory analysis: JAX pass")
@pytest.mark.parametrize(
    "preset, seq_len, batch, mode",
    [
        ("bert_tiny", 128, 8, "finetune"),
        ("bert_mini", 512, 8, "finetune"),
        ("bert_tiny", 128, 8, "pretrain"),
        ("bert_tiny", 512, 8, "inference"),
    ],
)
def test_plan_is_within_8_percent_of_the_compiled_steps_peak(preset, seq_len, batch, mode):
    from bertzoo.planner import measure_peak

    measured = measure_peak(preset, seq_len, batch, mode, num_classes=3)
    predicted = plan(preset, seq_len=seq_len, mode=mode, num_classes=3).peak_bytes(batch)
    # Measured (jax 0.10, CPU): +3.6%, -0.4%, +2.8%, +2.6%; every float32 row
    # of the whole grid (benchmarks/plan_calibration.py) is within 7.3%; the
    # issue's goal is 15%.
    assert abs(predicted / measured - 1) < 0.08, (predicted, measured)


def _docs_plan_table():
    text = PLANNER_PAGE.read_text(encoding="utf-8")
    section = text.split("<!-- plan-table -->")[1]
    rows = re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \|", section, flags=re.M)
    return {int(s): (int(original), int(planned)) for s, original, planned in rows}


@pytest.mark.backend_independent
def test_docs_12gib_table_is_what_the_planner_says():
    table = _docs_plan_table()
    assert sorted(table) == [64, 128, 256, 320, 384, 512]
    # The original BERT README's table (REFERENCE.md).
    assert {s: o for s, (o, _) in table.items()} == {
        64: 64,
        128: 32,
        256: 16,
        320: 14,
        384: 12,
        512: 6,
    }
    for seq_len, (original, planned) in table.items():
        assert plan("bert_base", seq_len=seq_len, memory="12GiB", optimizer="adam").max_batch == (
            planned
        )
        # The XLA step keeps less than the 2018 TensorFlow graph did. docs/planner.md:
        # "from 256 tokens on 1.2-1.5x the original's; at 64 and 128 about 2x".
        low, high = (1.8, 2.1) if seq_len <= 128 else (1.15, 1.5)
        assert low <= planned / original <= high, (seq_len, planned / original)


@pytest.mark.backend_independent
def test_parse_memory():
    assert parse_memory("12GiB") == 12 * GiB
    assert parse_memory("16 GB") == 16 * 10**9
    assert parse_memory("0.5gib") == GiB // 2
    assert parse_memory(1000) == 1000
    assert parse_memory("4096B") == 4096
    for bad in ("12XB", "", "-1GB", "0GiB", "GiB"):
        with pytest.raises(ValueError, match="Valid: a positive number"):
            parse_memory(bad)
    # A bare number is not taken for bytes (`--memory 16` planned for 16 B).
    for bare in ("16", " 16 ", "0.5"):
        with pytest.raises(ValueError, match=r"has no unit\. Valid: .*GiB .*GB .*B \(bytes\)"):
            parse_memory(bare)


@pytest.mark.backend_independent
def test_bad_arguments_say_what_is_valid():
    with pytest.raises(ValueError, match="max_sequence_length 512"):
        plan("bert_base", seq_len=1024)
    # RoBERTa's 514 positions hold 512 tokens.
    with pytest.raises(ValueError, match="max_sequence_length 514 less the 2 positions"):
        plan("roberta_base", seq_len=513)
    assert plan("roberta_base", seq_len=512)
    with pytest.raises(ValueError, match="Valid: finetune, pretrain, inference"):
        plan("bert_base", mode="train")
    with pytest.raises(ValueError, match="Valid: adamw, lamb, adam"):
        plan("bert_base", optimizer="sgd")
    with pytest.raises(ValueError, match="gradient_accumulation"):
        plan("bert_base", gradient_accumulation=0)
    with pytest.raises(bertzoo.PresetError, match="Built-in presets"):
        plan("bert_nope")
    with pytest.raises(ValueError, match="lacks num_heads, intermediate_dim"):
        plan({"vocabulary_size": 100, "num_layers": 2, "hidden_dim": 8})


@pytest.mark.backend_independent
def test_command_line(capsys):
    assert main(["plan", "bert_base", "--seq-len", "512", "--tflops", "312"]) == 0
    table = capsys.readouterr().out
    expected = plan("bert_base", seq_len=512, tflops=312)
    assert re.search(rf"^largest batch\s+{expected.max_batch}$", table, flags=re.M)
    assert "parameters              109,483,778" in table and "40% utilisation" in table
    argv = ["plan", "albert_base", "--seq-len", "128", "--mode", "pretrain", "--json"]
    assert main(argv + ["--optimizer", "lamb", "--gradient-accumulation", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["max_batch"] == 2 * printed["max_micro_batch"] > 0
    assert printed["parameters"] == plan("albert_base", seq_len=128, mode="pretrain").parameters
    for bad, message in (
        (["--memory", "12XB"], "is not a size"),
        (["--memory", "16"], "memory='16' has no unit. Valid: a size with its unit, e.g. 16GiB"),
        (["--seq-len", "600"], "max_sequence_length 512"),
        (["--gradient-accumulation", "0"], "gradient_accumulation"),
    ):
        assert main(["plan", "bert_base", *bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and message in err


@pytest.mark.backend_independent
def test_batch_size_flag():
    assert batch_size_flag("auto") == batch_size_flag(" AUTO ") == "auto"
    assert batch_size_flag("48") == 48
    with pytest.raises(argparse.ArgumentTypeError, match="positive integer or 'auto'"):
        batch_size_flag("lots")


# Runs under JAX too: without --device-memory, device_memory() asks the backend.
def test_finetune_auto_batch_size_is_the_plans(minilm_dir, tmp_path):
    config = FinetuneConfig(
        batch_size="auto", device_memory="2GiB", sequence_length=96, output=str(tmp_path / "r")
    )
    resolved = resolve_batch_size(config, str(minilm_dir), 96, "finetune", FinetuneError)
    expected = plan(str(minilm_dir), seq_len=96, memory="2GiB").max_batch
    assert resolved.batch_size == expected > 8
    two = resolve_batch_size(config, str(minilm_dir), 96, "finetune", FinetuneError, replicas=2)
    assert two.batch_size == 2 * expected
    fixed = FinetuneConfig(batch_size=16)
    assert resolve_batch_size(fixed, str(minilm_dir), 96, "finetune", FinetuneError) is fixed
    with pytest.raises(FinetuneError, match="one sequence of 96 tokens needs"):
        small = FinetuneConfig(batch_size="auto", device_memory="50MiB")
        resolve_batch_size(small, str(minilm_dir), 96, "finetune", FinetuneError)
    # The device's memory when none is given (on CPU: the available memory).
    auto = resolve_batch_size(
        FinetuneConfig(batch_size="auto"), str(minilm_dir), 96, "finetune", FinetuneError
    )
    assert auto.batch_size > expected


# Runs under JAX too: make_distribution() is the backend's.
def test_pretrain_auto_batch_size(tmp_path):
    from bertzoo.training.distribute import make_distribution

    distribution = make_distribution("default")
    config = PretrainConfig(
        batch_size="auto", device_memory="4GiB", seq_len=(128, 256), output=str(tmp_path)
    )
    resolved = _auto_batch_size(config, distribution)
    assert config.preset == "bert_tiny"
    architecture = {**backbone_config("bert_tiny"), "vocabulary_size": config.vocab_size}
    expected = plan(architecture, seq_len=256, memory="4GiB", mode="pretrain")
    assert resolved.batch_size == expected.max_batch
    with pytest.raises(PretrainError, match="objective electra"):
        _auto_batch_size(PretrainConfig(batch_size="auto", objective="electra"), distribution)


@pytest.mark.slow
def test_recipe_refuses_an_auto_batch_that_cannot_fit(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(root / "recipes" / "finetune.py"), "--batch-size", "auto"]
        + ["--device-memory", "10MiB", "--output", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --batch-size auto: one sequence of 64 tokens needs"), last
    assert not out.exists()


@pytest.mark.backend_independent
def test_docs_printout_and_figures_are_the_planners():
    """docs/planner.md's example printout is what the command prints, and the
    12 GiB card holds the 512-token batches the page states for flash
    attention and bfloat16."""
    text = PLANNER_PAGE.read_text(encoding="utf-8")
    command = "python -m bertzoo plan bert_base --seq-len 512 --memory 12GiB --tflops 312"
    assert command in text
    printout = re.search(r"```\n(preset\s+bert_base\n.*?)```", text, flags=re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(command.split()[3:]) == 0
    assert out.getvalue().strip() == printout.strip()
    flash = plan("bert_base", seq_len=512, memory="12GiB", optimizer="adam", attention="flash")
    bf16 = plan(
        "bert_base", seq_len=512, memory="12GiB", optimizer="adam", precision="mixed_bfloat16"
    )
    stated = re.search(r"flash` the same card holds (\d+) sequences.*?bfloat16` (\d+)", text, re.S)
    assert (flash.max_batch, bf16.max_batch) == tuple(int(n) for n in stated.groups())
