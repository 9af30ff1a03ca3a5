"""Pre-training settings for RoBERTa-family presets: `auto` picks masked LM
only (no NSP: RoBERTa has no sentence head), and a sequence may use the
positions that do not serve padding (514 rows, 512 tokens)."""

from pathlib import Path

import pytest

import bertzoo
from bertzoo.training.pretrain import PretrainConfig, PretrainError
from bertzoo.training.pretrain_config import check_positions
from bertzoo.training.pretrain_model import resolve_objective

pytestmark = pytest.mark.backend_independent

ROBERTA = Path(__file__).resolve().parent.parent / "fixtures" / "roberta" / "model"


def _config(tmp_path, **changes):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("이 원피스 정말 예뻐요. 배송이 빨라서 좋았어요.\n", encoding="utf-8")
    settings = dict(
        preset="klue_roberta_small",
        seq_len=(512,),
        steps=(4,),
        batch_size=4,
        corpus=(str(corpus),),
        corpus_layout="documents",
        verbose=0,
    )
    return PretrainConfig(**{**settings, **changes})


def test_auto_objective_is_masked_lm_only(tmp_path):
    backbone = bertzoo.BertBackbone.from_preset(ROBERTA)  # RobertaModel: a pooler
    assert backbone.use_pooler is True
    config = _config(tmp_path, preset=str(ROBERTA), seq_len=(38,))
    assert resolve_objective(config, backbone) == "none"
    # The built-in preset has a pooler (RobertaModel's) and still trains
    # without a sentence pair: one document per line is accepted with auto.
    check_positions(_config(tmp_path))
    with pytest.raises(PretrainError, match="trains on pairs"):
        check_positions(_config(tmp_path, objective="nsp"))


def test_sequence_length_counts_the_padding_rows_out(tmp_path):
    check_positions(_config(tmp_path, seq_len=(512,)))
    with pytest.raises(PretrainError, match="longer than the model's 512 position"):
        check_positions(_config(tmp_path, seq_len=(513,)))


def test_a_preset_with_one_segment_row_trains_masked_lm_only(tmp_path):
    """A hand-built one-segment preset (no RoBERTa metadata): auto trains
    masked LM only, and nsp/sop, whose second sentences have segment id 1,
    are refused before any work."""
    backbone = bertzoo.BertBackbone(
        vocabulary_size=40, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
        max_sequence_length=64, num_segments=1,
    )  # fmt: skip
    backbone.save_to_preset(tmp_path / "one_segment")
    preset = str(tmp_path / "one_segment")
    config = _config(tmp_path, preset=preset, seq_len=(32,), corpus_layout="sentences")
    assert resolve_objective(config, backbone) == "none"
    check_positions(config)
    for objective in ("nsp", "sop"):
        with pytest.raises(PretrainError, match=f"objective {objective} .*num_segments=1"):
            check_positions(_config(tmp_path, preset=preset, seq_len=(32,), objective=objective,
                                    corpus_layout="sentences"))  # fmt: skip
