"""Attention maps (bertzoo.attention_maps, `python -m bertzoo attention`) on
the real all-MiniLM-L6-v2 checkpoint: the probabilities are the model's
(checked against a numpy recomputation from one layer's weights and its
input hidden states), the pictures are real PNGs of the expected size that
are not blank, and the values drawn in a cell are the model's."""

import sys

import matplotlib.image
import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo.attention_maps import attention_maps, plot_attention
from bertzoo.cli import main

TEXT, PAIR = "The cat sat on the mat because it was tired.", "고양이는 피곤했다."


@pytest.fixture(scope="module")
def maps(minilm_dir):
    return attention_maps(minilm_dir, TEXT, pair=PAIR)


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), "float64")


def test_probabilities_are_the_models(maps, minilm_dir):
    assert maps.tokens[0] == "[CLS]" and maps.tokens.count("[SEP]") == 2
    assert maps.tokens[1:4] == ["the", "cat", "sat"]
    assert maps.probabilities.shape == (6, 12, len(maps.tokens), len(maps.tokens))
    np.testing.assert_allclose(maps.probabilities.sum(-1), 1.0, atol=1e-9)
    # Layer 3 recomputed in numpy from its query/key weights and its input.
    backbone = bertzoo.BertBackbone.from_preset(minilm_dir)
    tokenizer = bertzoo.BertTokenizer.from_preset(minilm_dir)
    ids = np.array([[tokenizer.token_to_id(t) for t in maps.tokens]], "int32")
    sep = maps.tokens.index("[SEP]")
    x = {
        "token_ids": ids,
        "segment_ids": (np.arange(ids.shape[1]) > sep).astype("int32")[None],
        "padding_mask": np.ones_like(ids),
    }
    hidden = _np(backbone.feature_model()(x)["hidden_states"][2])[0]  # input of layer 3
    attention = backbone.transformer_layers[2].self_attention
    q = hidden @ _np(attention.query.kernel) + _np(attention.query.bias)
    k = hidden @ _np(attention.key.kernel) + _np(attention.key.bias)
    heads, dim = attention.num_heads, attention.head_dim
    q = q.reshape(-1, heads, dim).transpose(1, 0, 2)
    k = k.reshape(-1, heads, dim).transpose(1, 0, 2)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(dim)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(maps.scores[2], scores, atol=2e-4)
    np.testing.assert_allclose(maps.probabilities[2], probs, atol=1e-5)


def test_summary_is_the_average_attention_to_cls_sep_and_self(maps):
    summary = maps.summary()
    p = maps.probabilities
    seps = [i for i, t in enumerate(maps.tokens) if t == "[SEP]"]
    np.testing.assert_allclose(summary["[CLS]"], p[..., 0].mean(axis=(1, 2)))
    np.testing.assert_allclose(summary["[SEP]"], p[..., seps].sum(-1).mean(axis=(1, 2)))
    n = len(maps.tokens)
    np.testing.assert_allclose(summary["self"], np.trace(p, axis1=2, axis2=3).mean(1) / n)
    # MiniLM, as BERT-analysis papers describe for BERT: heads attend to
    # [CLS] far more than to a uniform share (1/17). Measured: 0.19 in layer
    # 1, 0.46-0.58 in layers 2-5 (docs/inspecting.md's "about half"), 0.35 in 6.
    cls = summary["[CLS]"]
    assert cls[0] < 0.3 and ((0.4 < cls[1:5]) & (cls[1:5] < 0.65)).all() and cls[5] > 0.25
    # The Korean pair is two [UNK]s (jamo MiniLM's vocabulary lacks).
    assert maps.tokens[-5:] == ["[SEP]", "[UNK]", "[UNK]", ".", "[SEP]"]


def _image(path):
    pixels = matplotlib.image.imread(path)
    return pixels.shape, float(pixels[..., :3].std())


@pytest.mark.backend_independent  # drawing numpy arrays; the numbers are checked above
def test_grid_and_single_head_pictures(maps, tmp_path):
    grid = plot_attention(maps, tmp_path / "grid.png", dpi=50)
    shape, spread = _image(grid["path"])
    n = len(maps.tokens)
    # Token labels are legible (7 points: 10 pixels at 100 dpi, not 3), and
    # each cell's rows are spaced at least a label apart.
    assert grid["label_points"] == 7 and grid["dpi"] == 50
    cell = max((7 + 2) / 72 * n, 1.6)
    assert cell / n * 72 >= grid["label_points"]
    expected = ((6 * cell + 3.2) * 50, (12 * cell + 0.5) * 50)
    assert all(abs(got - want) <= 1 for got, want in zip(shape[:2], expected)), shape
    assert spread > 0.1  # not blank
    assert sorted(grid["drawn"]) == [
        (layer, head) for layer in range(1, 7) for head in range(1, 13)
    ]
    # The cell drawn for layer 3, head 2, query "cat", key "sat" is the
    # model's probability.
    q, k = maps.tokens.index("cat"), maps.tokens.index("sat")
    assert grid["drawn"][(3, 2)][q, k] == pytest.approx(maps.probabilities[2, 1, q, k])

    one = plot_attention(maps, tmp_path / "one.png", layer=3, head=2, scores=True)
    shape, spread = _image(one["path"])
    assert shape[0] > 500 and shape[1] > 400 and spread > 0.1
    assert list(one["drawn"]) == [(3, 2)]
    np.testing.assert_array_equal(one["drawn"][(3, 2)], maps.scores[2, 1])

    with pytest.raises(ValueError, match="layer must be an integer in 1..6"):
        plot_attention(maps, tmp_path / "bad.png", layer=7)
    with pytest.raises(ValueError, match="head= needs layer="):
        plot_attention(maps, tmp_path / "bad.png", head=1)
    assert not (tmp_path / "bad.png").exists()


@pytest.mark.slow
@pytest.mark.backend_independent  # the command around attention_maps and plot_attention
def test_command_line(minilm_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "attn.png"
    assert main(["attention", str(minilm_dir), TEXT, "--out", str(out), "--layer", "2"]) == 0
    assert out.is_file() and _image(out)[1] > 0.1
    assert f"{out}: layer 2, all 12 heads (of 6 layers x 12 heads)," in capsys.readouterr().out
    # An existing file is never replaced; bad settings are one line.
    assert main(["attention", str(minilm_dir), TEXT, "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    bad = tmp_path / "bad.png"
    assert (
        main(
            ["attention", str(minilm_dir), TEXT, "--out", str(bad), "--head", "13", "--layer", "1"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: head must be an integer in 1..12") and err.count("\n") == 1
    one = tmp_path / "one.png"
    assert (
        main(["attention", str(minilm_dir), TEXT, "--out", str(one), "--layer", "3", "--head", "2"])
        == 0
    )
    assert f"{one}: layer 3 head 2 (of 6 layers x 12 heads)," in capsys.readouterr().out
    # Without matplotlib: a clear message, the numbers still work.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["attention", str(minilm_dir), TEXT, "--out", str(bad)]) == 2
    assert 'pip install matplotlib, or pip install ".[plot]"' in capsys.readouterr().err
    assert not bad.exists()


def test_a_one_segment_model_s_pair_maps_with_segment_ids_0():
    """KLUE-RoBERTa (one token-type row, 40 positions of which 2 serve
    padding): a pair's maps come from segment ids 0 (id 1 was out of range)
    at a length its positions hold."""
    from pathlib import Path

    klue = Path(__file__).parent / "fixtures" / "roberta" / "klue_masked_lm"
    maps = attention_maps(klue, "이 원피스 정말 예뻐요.", pair="사이즈가 조금 커요.")
    assert maps.tokens[0] == "[CLS]" and maps.tokens.count("[SEP]") == 2
    assert np.isfinite(maps.scores).all() and np.isfinite(maps.probabilities).all()
