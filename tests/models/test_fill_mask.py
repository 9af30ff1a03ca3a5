"""fill_mask and `python -m bertzoo fill-mask`: the top-k tokens and
probabilities at each [MASK], checked against transformers' fill-mask
pipeline on small random BERT, DistilBERT and ELECTRA-generator checkpoints
(tests/fixtures/make_fill_mask_reference.py writes them and the pipeline's
answers). Bar: the same top-k ids, probabilities within 1e-5 (measured:
<= 5.1e-6)."""

import json
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo.cli import main
from bertzoo.models.electra import ElectraPretrainer
from bertzoo.models.fill_mask import NoMaskedLMHead, fill_mask

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REF = json.loads((FIXTURES / "fill_mask" / "reference.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(REF["results"]))
def test_matches_the_transformers_fill_mask_pipeline(name):
    per_text = REF["results"][name]
    results = fill_mask(FIXTURES / "fill_mask" / name, list(per_text), top_k=REF["top_k"])
    for (text, masks), got in zip(per_text.items(), results):
        assert len(got) == len(masks), text  # one list per [MASK], in order
        for expected, candidates in zip(masks, got):
            assert [c["token_id"] for c in candidates] == expected["ids"], text
            scores = np.array([c["score"] for c in candidates])
            np.testing.assert_allclose(scores, expected["scores"], atol=1e-5, err_msg=text)
            assert all(np.diff(scores) <= 0)


def _saved_pretrainer(tmp_path):
    """A BertPretrainer saved as the pre-training recipe saves it (backbone
    + MLM head in heads.safetensors + vocabulary)."""
    directory = FIXTURES / "fill_mask" / "bert"
    backbone = bertzoo.BertBackbone.from_preset(directory)
    model = bertzoo.BertPretrainer(backbone, objective="none")
    model.mlm_head.bias.assign(np.linspace(-1, 1, backbone.vocabulary_size).astype("float32"))
    tokenizer = bertzoo.BertTokenizer.from_preset(directory)
    out = tmp_path / "preset"
    tokenizer.save_to_preset(out)
    backbone.save_to_preset(
        out,
        preset_info={"tokenizer": tokenizer.preset_section()},
        head_tensors=model.head_tensors(),
    )
    return model, tokenizer, out


def test_a_saved_pretrainer_and_the_model_object_agree(tmp_path):
    model, tokenizer, preset = _saved_pretrainer(tmp_path)
    text = "Paris is the [MASK] of France."
    from_dir = fill_mask(preset, text, top_k=4)
    from_object = fill_mask(model, text, top_k=4, tokenizer=tokenizer)
    assert [c["token_id"] for c in from_dir[0]] == [c["token_id"] for c in from_object[0]]
    # The probabilities are the softmax of the head's logits at the mask.
    ids = [tokenizer.cls_token_id, *np.asarray(tokenizer.tokenize(["Paris is the"])[0])]
    position = len(ids)
    ids += [tokenizer.mask_token_id, *np.asarray(tokenizer.tokenize(["of France."])[0])]
    ids += [tokenizer.sep_token_id]
    x = np.array([ids], "int32")
    logits = model(
        {
            "token_ids": x,
            "segment_ids": np.zeros_like(x),
            "padding_mask": np.ones_like(x),
            "mask_positions": np.array([[position]], "int32"),
        }
    )["mlm"]
    p = ops.convert_to_numpy(keras.activations.softmax(logits))[0, 0]
    for candidate in from_dir[0]:
        assert candidate["score"] == pytest.approx(float(p[candidate["token_id"]]), abs=1e-6)
        assert candidate["token"] == tokenizer.id_to_token(candidate["token_id"])


def test_an_electra_preset_fills_masks_with_its_generator(tmp_path):
    disc = bertzoo.BertBackbone.from_preset(FIXTURES / "fill_mask" / "electra_generator")
    disc = bertzoo.BertBackbone(**{**disc.get_config(), "hidden_dim": 32, "num_heads": 4})
    disc.preset_info = {"metadata": {"model_type": "electra"}}
    generator = ElectraPretrainer.generator_for(disc, 0.5)
    model = ElectraPretrainer(generator, disc)
    tokenizer = bertzoo.BertTokenizer.from_preset(FIXTURES / "fill_mask" / "electra_generator")
    model.save_to_preset(tmp_path / "electra", tokenizer=tokenizer)
    text = ["서울은 대한민국의 [MASK]이다.", "The [MASK] sat on the [MASK]."]
    saved = fill_mask(tmp_path / "electra", text, top_k=3)  # via electra/generator
    live = fill_mask(model, text, top_k=3, tokenizer=tokenizer)
    for a, b in zip(saved, live):
        for x, y in zip(a, b):
            assert [c["token_id"] for c in x] == [c["token_id"] for c in y]
            np.testing.assert_allclose([c["score"] for c in x], [c["score"] for c in y], atol=1e-5)


def test_a_checkpoint_without_a_masked_lm_head_is_refused_before_a_model_is_built(
    minilm_dir, monkeypatch
):
    """MiniLM (a BertModel: no heads) is refused from its weights file's
    tensor names, without building the model (before: 7.7 s to refuse)."""
    from bertzoo.models import fill_mask as fill_mask_module

    def built(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(fill_mask_module.BertBackbone, "from_preset", built)
    with pytest.raises(NoMaskedLMHead, match="has no masked-LM head .*holds no heads"):
        fill_mask(minilm_dir, "a [MASK]")


def test_clear_errors(tmp_path):
    with pytest.raises(NoMaskedLMHead, match="built-in architecture without weights"):
        fill_mask("bert_tiny", "a [MASK]")
    with pytest.raises(NoMaskedLMHead, match="has no masked-LM head"):
        fill_mask(FIXTURES / "electra" / "discriminator", "a [MASK]")
    preset = FIXTURES / "fill_mask" / "bert"
    with pytest.raises(ValueError, match="has no \\[MASK\\]"):
        fill_mask(preset, ["Paris [MASK]", "no mask here"])
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        fill_mask(preset, "a [MASK]", top_k=0)
    long_text = "Paris " * 50 + "[MASK]"
    with pytest.raises(ValueError, match="the model reads at most 40"):
        fill_mask(preset, long_text)
    model, _, _ = _saved_pretrainer(tmp_path)
    with pytest.raises(ValueError, match="Pass tokenizer="):
        fill_mask(model, "a [MASK]")


def test_command_line(capsys, tmp_path):
    preset = str(FIXTURES / "fill_mask" / "bert")
    text = "The [MASK] sat on the [MASK]."
    assert main(["fill-mask", preset, text, "--top-k", "2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = REF["results"]["bert"][text]
    assert [[c["token_id"] for c in mask] for mask in printed[text]] == [
        m["ids"][:2] for m in expected
    ]
    assert main(["fill-mask", preset, text]) == 0
    table = capsys.readouterr().out
    assert "mask 1:" in table and "mask 2:" in table
    assert main(["fill-mask", str(FIXTURES / "electra" / "discriminator"), "a [MASK]"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "masked-LM head" in err
