"""The pre-training recipe trains the vocabulary its preset's tokenizer kind
takes when none is given: a byte-level BPE (vocab.json + merges.txt) for a
RoBERTa-shaped preset, XLM-R's unigram model for an XLM-R-shaped one, and
with --pre-tokenize morphemes a vocabulary learnt on Korean morphemes."""

import importlib.util
import json
from pathlib import Path

import pytest

from bertzoo.tokenizers import morphemes
from bertzoo.tokenizers.byte_bpe import ByteLevelBPETokenizer
from bertzoo.tokenizers.fairseq import XLMRobertaTokenizer
from bertzoo.training.pretrain import PretrainConfig, PretrainError, run_pretraining
from bertzoo.training.pretrain_data import check_vocabulary_training, prepare_tokenizer

KOREAN = Path(__file__).resolve().parents[1] / "fixtures" / "korean_documents.txt"


def roberta_tiny(directory):
    """A RoBERTa-shaped architecture (config.json, no weights: random
    init), 2 layers of 32."""
    directory.mkdir(parents=True, exist_ok=True)
    backbone = dict(vocabulary_size=600, num_layers=2, num_heads=2, hidden_dim=32)
    backbone.update(intermediate_dim=64, num_segments=1, use_pooler=False, activation="gelu")
    backbone.update(dropout=0.0, max_sequence_length=34, layer_norm_epsilon=1e-5)
    document = {
        "name": "roberta_tiny",
        "backbone": {**backbone, "position_padding_id": 1},
        "tokenizer": {"kind": "byte_level_bpe"},
        "metadata": {"model_type": "roberta"},
    }
    (directory / "config.json").write_text(json.dumps(document), encoding="utf-8")
    return directory


# What this checks, the vocabulary the run trains, the corpus prepared with
# it and the preset it publishes, is TensorFlow ops and files under either
# backend (a RoBERTa-shaped backbone trains under JAX in the model tests).
@pytest.mark.slow
@pytest.mark.backend_independent
def test_roberta_run_trains_its_byte_level_bpe(tmp_path):
    out = tmp_path / "run"
    config = PretrainConfig(
        preset=str(roberta_tiny(tmp_path / "roberta_tiny")),
        corpus=(str(KOREAN),),
        vocab_size=600,
        seq_len=(32,),
        steps=(2,),
        batch_size=8,
        eval_batches=1,
        jit_compile=False,
        prepare_workers=1,
        verbose=0,
        output=str(out),
    )
    metrics = run_pretraining(config)
    assert metrics["objective"] == "none" and metrics["steps"] == 2
    trained = ByteLevelBPETokenizer(out / "vocab.json")  # merges.txt read beside it
    assert trained.vocabulary_size == 600 and len(trained.merges) == 600 - 261
    assert trained.pad_token_id == 1  # the backbone's position_padding_id
    saved = ByteLevelBPETokenizer.from_preset(out / "preset")
    assert saved.vocabulary == trained.vocabulary and saved.merges == trained.merges
    claimed = json.loads((out / ".bertzoo-run.json").read_text(encoding="utf-8"))["paths"]
    assert {"vocab.json", "merges.txt"} <= set(claimed)  # --no-resume may remove them


@pytest.mark.backend_independent
def test_xlmr_shaped_preset_trains_a_unigram_model(tmp_path):
    config = PretrainConfig(preset="xlm_roberta_base", corpus=(str(KOREAN),), vocab_size=900)
    tokenizer = prepare_tokenizer(config, tmp_path, [str(KOREAN)])
    assert isinstance(tokenizer, XLMRobertaTokenizer)
    assert (tmp_path / "sentencepiece.bpe.model").is_file()
    assert tokenizer.vocabulary_size <= 900 and tokenizer.vocabulary[:4] == [
        "<s>",
        "<pad>",
        "</s>",
        "<unk>",
    ]


@pytest.mark.backend_independent
@pytest.mark.skipif(importlib.util.find_spec("kiwipiepy") is None, reason="needs kiwipiepy")
def test_recipe_learns_a_wordpiece_vocabulary_on_morphemes(tmp_path):
    config = PretrainConfig(
        preset="bert_tiny",
        corpus=(str(KOREAN),),
        vocab_size=3000,
        pre_tokenize="morphemes",
        lowercase=False,
        strip_accents=False,
    )
    check_vocabulary_training(config)
    tokenizer = prepare_tokenizer(config, tmp_path, [str(KOREAN)])
    pieces = tokenizer.detokenize(tokenizer("친구가 회사에서 일해요"))
    assert pieces == ["친구", "##가", "회사", "##에서", "일", "##해", "##요"]


@pytest.mark.backend_independent
def test_vocabulary_settings_the_kind_does_not_take_are_refused(tmp_path, monkeypatch):
    corpus = (str(KOREAN),)
    with pytest.raises(PretrainError, match="trains a wordpiece or byte_level_bpe vocabulary"):
        check_vocabulary_training(
            PretrainConfig(preset="albert_base", corpus=corpus, pre_tokenize="morphemes")
        )
    preset = str(roberta_tiny(tmp_path / "r"))
    with pytest.raises(PretrainError, match="--include-hangul does not apply"):
        check_vocabulary_training(PretrainConfig(preset=preset, include_hangul="common"))
    monkeypatch.setattr(morphemes.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PretrainError, match=r'pip install "kiwipiepy>=0\.20"') as e:
        check_vocabulary_training(PretrainConfig(preset=preset, pre_tokenize="morphemes"))
    assert "\n" not in str(e.value)
    # A given vocabulary is not trained: nothing to check.
    given = PretrainConfig(preset="albert_base", vocab=str(KOREAN), pre_tokenize="morphemes")
    check_vocabulary_training(given)
