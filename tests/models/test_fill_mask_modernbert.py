"""Fill-mask with ModernBERT's tokenizer.json against transformers'
`fill-mask` pipeline on a small random ModernBertForMaskedLM
(tests/fixtures/make_fill_mask_modernbert_reference.py writes it and the
pipeline's answers; transformers 5.24, tokenizers 0.23.3).

Its [MASK] has `lstrip`: it takes the whitespace before it ("the [MASK]" is
"the", "[MASK]"), so the model reads the pipeline's input ids; a predicted
token reads with its space ("Ġx" -> " x"). Bar: the same input ids, the
same top-k ids, probabilities within 1e-5 (measured: <= 1.3e-6).
"""

import json
import shutil

import numpy as np
import pytest

from bertzoo.cli import main
from bertzoo.models.fill_mask import _encode, fill_mask, masked_lm_model
from tests.conftest import FIXTURES

REF = json.loads((FIXTURES / "fill_mask" / "modernbert_reference.json").read_text(encoding="utf-8"))
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# What this file adds (the tokens around [MASK], how candidates read) does
# not depend on the Keras backend; ModernBERT's masked-LM logits are checked
# against transformers under both (tests/convert/test_hf_modernbert.py).
pytestmark = pytest.mark.backend_independent


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The fixture's checkpoint directory with its tokenizer files copied
    back in (the fixture keeps one copy of them)."""
    directory = tmp_path_factory.mktemp("fill_mask_modernbert") / "modernbert"
    shutil.copytree(FIXTURES / "fill_mask" / "modernbert", directory)
    for name in TOKENIZER_FILES:
        shutil.copy(FIXTURES / "modernbert_tokenizer" / name, directory / name)
    return directory


def test_matches_the_transformers_fill_mask_pipeline(checkpoint):
    """Every text: the pipeline's input ids ([MASK] without the whitespace
    before it), top-k ids and probabilities, each token read alone, and the
    text with the mask filled (one text longer than the local window)."""
    per_text = REF["results"]["modernbert"]
    texts = list(per_text)
    model, tokenizer = masked_lm_model(checkpoint)
    assert model.backbone.local_attention_window == 8
    results = fill_mask(model, texts, top_k=REF["top_k"], tokenizer=tokenizer)
    worst = 0.0
    for text, got in zip(texts, results, strict=True):
        expected = per_text[text]
        ids = _encode(tokenizer, text, model.backbone.max_sequence_length)[0]
        assert ids == expected["input_ids"], text
        assert len(got) == len(expected["masks"]), text
        for want, candidates in zip(expected["masks"], got):
            assert [c["token_id"] for c in candidates] == want["ids"], text
            scores = np.array([c["score"] for c in candidates])
            worst = max(worst, float(np.abs(scores - want["scores"]).max()))
            np.testing.assert_allclose(scores, want["scores"], atol=1e-5, err_msg=text)
            for c, token_str in zip(candidates, want["token_str"]):
                assert c["token"] == tokenizer.id_to_token(c["token_id"])
                assert c["text"] == token_str, (text, c)
            for c, sequence in zip(candidates, want.get("sequence", [])):
                assert c["sequence"] == sequence, (text, c)
    print(f"worst probability error {worst:.2g}")


def test_command_line(capsys, checkpoint):
    """The checkpoint directory, as `python -m bertzoo fill-mask` reads it."""
    text = "Fill the [MASK] in."
    assert main(["fill-mask", str(checkpoint), text, "--top-k", "2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)[text]
    expected = REF["results"]["modernbert"][text]["masks"][0]
    assert [c["token_id"] for c in printed[0]] == expected["ids"][:2]
    assert [c["sequence"] for c in printed[0]] == expected["sequence"][:2]
