"""Fill-mask with RoBERTa's byte-level BPE and XLM-R's SentencePiece, against
transformers' `fill-mask` pipeline on small random RobertaForMaskedLM and
XLMRobertaForMaskedLM checkpoints (tests/fixtures/make_fill_mask_roberta_reference.py
writes them and the pipeline's answers; transformers 5.24, tokenizers 0.23.3).

`<mask>` absorbs the whitespace before it, as the reference tokenizers'
`lstrip` does, so the model reads the pipeline's input ids; a predicted
token reads with its space ("Ġx" -> " x"). Bar: the same input ids, the
same top-k ids, probabilities within 1e-5 (measured: <= 8.3e-7).
"""

import json
import shutil

import numpy as np
import pytest

from bertzoo.cli import main
from bertzoo.models.fill_mask import _encode, fill_mask, masked_lm_model
from tests.conftest import FIXTURES

# What this file adds (the tokens around <mask>, how candidates read) does not
# depend on the Keras backend; the RoBERTa and XLM-R masked-LM logits are
# checked against transformers under both (tests/convert/test_hf_roberta.py).
pytestmark = pytest.mark.backend_independent

REF = json.loads((FIXTURES / "fill_mask" / "roberta_reference.json").read_text(encoding="utf-8"))
TOKENIZER_FILES = {
    "roberta": [FIXTURES / "byte_bpe" / "vocab.json", FIXTURES / "byte_bpe" / "merges.txt"],
    "xlm_roberta": [FIXTURES / "xlmr" / "sentencepiece.bpe.model"],
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """The fixture's checkpoint directories with their tokenizer files
    copied back in (the fixture keeps one copy of them)."""
    root = tmp_path_factory.mktemp("fill_mask_roberta")
    out = {}
    for name, files in TOKENIZER_FILES.items():
        directory = root / name
        shutil.copytree(FIXTURES / "fill_mask" / name, directory)
        for path in files:
            shutil.copy(path, directory / path.name)
        out[name] = directory
    return out


@pytest.fixture(scope="module")
def loaded(checkpoints):
    """(model, tokenizer) of each checkpoint, loaded once."""
    return {name: masked_lm_model(directory) for name, directory in checkpoints.items()}


@pytest.mark.parametrize("name", sorted(REF["results"]))
def test_matches_the_transformers_fill_mask_pipeline(name, loaded):
    """(The directories themselves go through the command line, below.)"""
    per_text = REF["results"][name]
    texts = list(per_text)
    model, tokenizer = loaded[name]
    results = fill_mask(model, texts, top_k=REF["top_k"], tokenizer=tokenizer)
    for text, got in zip(texts, results, strict=True):
        expected = per_text[text]
        ids = _encode(tokenizer, text, model.backbone.max_sequence_length)[0]
        assert ids == expected["input_ids"], text  # the whitespace before <mask> absorbed
        assert len(got) == len(expected["masks"]), text
        for want, candidates in zip(expected["masks"], got):
            assert [c["token_id"] for c in candidates] == want["ids"], text
            scores = np.array([c["score"] for c in candidates])
            np.testing.assert_allclose(scores, want["scores"], atol=1e-5, err_msg=text)
            for c, token_str in zip(candidates, want["token_str"]):
                assert c["token"] == tokenizer.id_to_token(c["token_id"])
                if name == "roberta":  # the reference decodes a token alone with its space
                    assert c["text"] == token_str, (text, c)
                else:  # its Metaspace decoder drops a decoded text's first space
                    assert c["text"].startswith(" ") == c["token"].startswith("▁"), c
                    assert c["text"].removeprefix(" ") == token_str, (text, c)
            for c, sequence in zip(candidates, want.get("sequence", [])):
                # RoBERTa's decoded sequence is the text with the token's bytes
                # in the mask's place; XLM-R's drops <unk> and puts a space
                # after <mask> (its tokenizer starts a word there): compared
                # where neither happens.
                if name == "roberta" or text in ("Fill the <mask> in.", "<mask>"):
                    assert c["sequence"] == sequence, (text, c)


def test_the_mask_takes_the_space_before_it_and_the_token_brings_its_own(loaded):
    model, tokenizer = loaded["roberta"]
    [[best, *_]] = fill_mask(model, "Fill the <mask> in.", top_k=2, tokenizer=tokenizer)
    # A byte of a character's UTF-8 (the random model's favourite) reads U+FFFD.
    assert best["token"] == "Ġê·" and best["text"] == " \ufffd"
    assert best["sequence"] == "Fill the \ufffd in."
    cases = (
        ("x<mask>y", "x{}y"),
        ("two \t<mask>\n<mask> masks", "two{}\n<mask> masks"),
        ("<mask> is", "{} is"),
    )
    for name in ("roberta", "xlm_roberta"):
        model, tokenizer = loaded[name]
        texts = [text for text, _ in cases]
        results = fill_mask(model, texts, top_k=3, tokenizer=tokenizer)
        for (text, sequence), (first, *_) in zip(cases, results, strict=True):
            for c in first:
                own = c["text"]
                if name == "xlm_roberta" and text.startswith("<mask>"):
                    own = own.removeprefix(" ")  # the "▁" XLM-R puts before every text
                assert c["sequence"] == sequence.format(own), (name, text, c)


def test_command_line_shows_the_token_with_its_space(capsys, checkpoints):
    """The checkpoint directories, as `python -m bertzoo fill-mask` reads them."""
    text = "Fill the <mask> in."
    for name in ("roberta", "xlm_roberta"):
        assert main(["fill-mask", str(checkpoints[name]), text, "--top-k", "2", "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)[text]
        expected = REF["results"][name][text]["masks"][0]
        assert [c["token_id"] for c in printed[0]] == expected["ids"][:2]
        assert [c["sequence"] for c in printed[0]][:1] == [f"Fill the{printed[0][0]['text']} in."]
    assert printed[0][0]["text"] == " pleas" and printed[0][0]["sequence"] == "Fill the pleas in."
    assert main(["fill-mask", str(checkpoints["xlm_roberta"]), text, "--top-k", "2"]) == 0
    assert '" pleas"' in capsys.readouterr().out
