"""Pre-training a ModernBERT-shaped preset as ModernBERT is pre-trained:
under `auto`, masked LM only with 30% of the tokens masked and full-sentence
packing (the user's explicit settings win; NSP/SOP are refused), on a
byte-level BPE vocabulary trained with the preset's own special tokens."""

import dataclasses
import json
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo.tokenizers.byte_bpe import ByteLevelBPETokenizer
from bertzoo.training.pretrain import PretrainConfig, PretrainError, run_pretraining
from bertzoo.training.pretrain_config import check_positions, mask_rate, resolve_defaults
from bertzoo.training.pretrain_data import resolve_packing
from bertzoo.training.pretrain_model import resolve_objective

KOREAN = Path(__file__).resolve().parents[1] / "fixtures" / "korean_documents.txt"
PRESETS = Path(__file__).resolve().parents[2] / "presets"


def modernbert_tiny(directory, model_type="modernbert", **changes):
    """modernbert_base's switches (pre-norm, no biases, GeGLU, rotary
    positions with two thetas, local/global layers) at 3 layers of 32: an
    architecture (config.json, no weights: random init)."""
    base = json.loads((PRESETS / "modernbert_base.json").read_text(encoding="utf-8"))
    backbone = {**base["backbone"], "vocabulary_size": 600, "num_layers": 3, "num_heads": 2}
    backbone.update(hidden_dim=32, intermediate_dim=48, max_sequence_length=64)
    backbone.update({"local_attention_window": 8, **changes})
    document = {"name": "modernbert_tiny", "backbone": backbone, "tokenizer": base["tokenizer"]}
    if model_type is not None:
        document["metadata"] = {"model_type": model_type}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(document), encoding="utf-8")
    return directory


@pytest.mark.backend_independent
def test_auto_trains_modernbert_shaped_presets_as_modernbert_is_trained(tmp_path):
    # A hand-built preset with ModernBERT's switches and no model_type is
    # recognised by its shape, as are the built-in presets.
    shaped = str(modernbert_tiny(tmp_path / "shaped", model_type=None))
    for preset in ("modernbert_base", shaped):
        config = PretrainConfig(preset=preset, seq_len=(32,), steps=(4,))
        assert mask_rate(config) == 0.30 and resolve_defaults(config).mask_rate == 0.30
        check_positions(config)
        assert resolve_packing(config, "none") == "full_sentences"
    backbone = bertzoo.BertBackbone.from_preset(shaped, load_weights=False)
    config = PretrainConfig(preset=shaped, seq_len=(32,), steps=(4,))
    assert resolve_objective(config, backbone) == "none"
    # Only rotary positions, or only a gated feed-forward, with two segment
    # rows and a pooler (which would otherwise take NSP): still MLM only.
    for name, changes in (("rope", {"gated_feedforward": False}), ("glu", {"rope_theta": None})):
        changes.update(num_segments=2, use_pooler=True, local_rope_theta=None)
        changes.update(local_attention_window=None)
        preset = modernbert_tiny(tmp_path / name, model_type=None, **changes)
        backbone = bertzoo.BertBackbone.from_preset(preset, load_weights=False)
        config = PretrainConfig(preset=str(preset), seq_len=(32,), steps=(4,))
        assert resolve_objective(config, backbone) == "none" and mask_rate(config) == 0.30
        check_positions(config)  # auto: no sentence pairs, so packing is allowed
    # The user's settings win.
    explicit = PretrainConfig(preset=shaped, mask_rate=0.15, packing="doc_sentences")
    assert mask_rate(explicit) == 0.15 and resolve_defaults(explicit).mask_rate == 0.15
    assert resolve_packing(explicit, "none") is None
    # BERT keeps its 15%.
    assert mask_rate(PretrainConfig(preset="bert_tiny")) == 0.15
    # NSP and SOP are refused in one line, before any work.
    for objective in ("nsp", "sop"):
        for preset in ("modernbert_base", shaped, str(tmp_path / "rope")):
            config = PretrainConfig(preset=preset, seq_len=(32,), steps=(4,), objective=objective)
            with pytest.raises(PretrainError, match=f"objective {objective} is not for ModernB"):
                check_positions(config)
            with pytest.raises(PretrainError) as e:
                run_pretraining(dataclasses.replace(config, output=str(tmp_path / "run")))
            assert "\n" not in str(e.value) and "--objective none or auto" in str(e.value)
    assert not (tmp_path / "run").exists()


def _weights(directory):
    return bertzoo.BertBackbone.from_preset(directory).get_weights()


@pytest.mark.slow
def test_modernbert_pretrains_on_its_byte_level_bpe_and_resumes_exactly(tmp_path):
    out = tmp_path / "run"
    settings = dict(
        preset=str(modernbert_tiny(tmp_path / "modernbert_tiny")),
        corpus=(str(KOREAN),),
        vocab_size=600,
        seq_len=(32,),
        steps=(12,),
        batch_size=8,
        learning_rate=2e-2,
        checkpoint_every=6,
        eval_batches=1,
        # TensorFlow: XLA compiles for longer than a few steps run; JAX
        # without jit runs op by op.
        jit_compile=keras.backend.backend() == "jax",
        prepare_workers=1,
        verbose=0,
        output=str(out),
    )
    metrics = run_pretraining(PretrainConfig(**settings))
    assert metrics["objective"] == "none" and metrics["packing"] == "full_sentences"
    assert metrics["mask_rate"] == 0.30 and metrics["steps"] == 12
    # Measured: held-out loss 6.39 -> 6.15 (TensorFlow), 6.43 -> 6.13 (JAX).
    assert np.isfinite(metrics["final_loss"])
    assert metrics["final_loss"] < metrics["initial_loss"] - 0.1, metrics
    recorded = json.loads((out / "run_config.json").read_text(encoding="utf-8"))
    assert recorded["mask_rate"] == 0.30  # a resume compares what was used

    # The trained vocabulary has ModernBERT's special tokens in RoBERTa's places.
    tokenizer = ByteLevelBPETokenizer.from_preset(out / "preset")
    assert (tokenizer.cls_token, tokenizer.cls_token_id) == ("[CLS]", 0)
    assert (tokenizer.pad_token_id, tokenizer.mask_token) == (1, "[MASK]")
    assert tokenizer.vocabulary_size == 600 and tokenizer.unk_token == "[UNK]"
    backbone = bertzoo.BertBackbone.from_preset(out / "preset")
    assert backbone.gated_feedforward and backbone.rope_theta == 160000.0
    ids = [0, *np.asarray(tokenizer("배송이 빨라서 좋았어요.")).tolist(), 2]  # [CLS] ... [SEP]
    ids = np.array([ids], "int32")
    out_features = backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})
    assert np.isfinite(np.asarray(out_features["sequence_output"])).all()

    # Resume: without the last checkpoint, the run goes on from step 6 and
    # ends where the uninterrupted run ended.
    straight = _weights(out / "preset")
    shutil.rmtree(sorted((out / "checkpoints").glob("ckpt-*"))[-1])
    resumed = run_pretraining(PretrainConfig(**settings))
    assert resumed["resumed_from_step"] == 6 and resumed["steps"] == 12
    diff = max(float(np.abs(a - b).max()) for a, b in zip(straight, _weights(out / "preset")))
    assert diff < 1e-5, diff
