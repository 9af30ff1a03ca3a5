"""Morpheme-aware vocabulary training (KLUE's recipe, `pre_tokenize=
"morphemes"`): Korean words cut at their morpheme boundaries by kiwipiepy
before the pieces are learnt, for WordPiece and byte-level BPE; the
tokenizers stay plain. On tests/fixtures/korean_documents.txt."""

import importlib.util
import logging
from pathlib import Path

import pytest

from bertzoo import cli
from bertzoo.tokenizers import morphemes, train, train_bpe, wordpiece_learner
from bertzoo.tokenizers.basic import BasicTokenizer
from bertzoo.tokenizers.byte_bpe import ByteLevelBPETokenizer
from bertzoo.tokenizers.corpus_stream import count_words
from bertzoo.tokenizers.wordpiece import BertTokenizer

# Files and tokenizer ops: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent

KOREAN = Path(__file__).resolve().parents[1] / "fixtures" / "korean_documents.txt"
CASED = dict(lowercase=False, strip_accents=False)
needs_kiwi = pytest.mark.skipif(
    importlib.util.find_spec("kiwipiepy") is None,
    reason='kiwipiepy is not installed (pip install ".[korean]")',
)


def test_cuts_fall_between_hangul_morphemes_only():
    # 했어요: 하 (6, 1) and 었 (6, 1) overlap the contraction 했; 어요 (7, 2).
    line = "되었습니다 했어요 1,500원 áb 😀요"
    spans = [(0, 1), (1, 1), (2, 3), (6, 1), (6, 1), (7, 2), (10, 5), (15, 1)]
    spans += [(17, 1), (18, 1), (19, 1), (21, 1), (22, 1)]
    assert [line[c] for c in morphemes.cuts(line, spans)] == ["었", "습", "어", "원"]
    # No Hangul either side (a, the combining acute, b; the emoji): no cut.
    assert morphemes.cuts("ab", [(0, 1), (1, 1)]) == []
    assert morphemes.cuts("漢字요", [(0, 1), (1, 1), (2, 1)]) == []


def test_unit_learner_is_tensorflow_texts_on_whole_words():
    """Counted without morphemes, the unit learner gives tensorflow-text's
    vocabulary exactly: the two kinds of vocabulary differ only by what
    they were counted on."""
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as tft

    counts = list(count_words([str(KOREAN)], BasicTokenizer(**CASED)).counts.items())
    settings = dict(lower_thresh=2, max_input_tokens=-1, max_unique_chars=700)
    reserved = ["[PAD]", "[UNK]"]
    expected = tft.learn(counts, 1500, reserved, **settings)
    assert wordpiece_learner.learn(counts, 1500, reserved, **settings) == expected


def test_unit_learner_keeps_pieces_inside_units():
    counts = {"학교": 5, "\x00에서": 9, "회사": 4, "\x00에서는": 3, "학교에서": 1}
    vocabulary = wordpiece_learner.learn(counts, 100, ["[PAD]"], lower_thresh=2)
    assert {"학교", "회사", "##에서", "##에서는"} <= set(vocabulary)
    # A continuation unit gives "##" pieces only, and no piece spans units
    # (single characters are always in, both ways).
    assert "에서" not in vocabulary and "학교에서" not in vocabulary
    assert not [t for t in vocabulary if len(t.removeprefix("##")) > 1 and "교에" in t]


@pytest.fixture(scope="module")
def wordpiece_vocabularies(tmp_path_factory):
    directory = tmp_path_factory.mktemp("morphemes")
    out = {}
    for how in ("morphemes", "words"):
        path = directory / f"{how}.txt"
        train.train_wordpiece([str(KOREAN)], 3000, output=path, pre_tokenize=how, **CASED)
        out[how] = BertTokenizer(path, **CASED)
    return out


@needs_kiwi
def test_wordpiece_on_morphemes_splits_particles_and_endings(wordpiece_vocabularies):
    m, plain = wordpiece_vocabularies["morphemes"], wordpiece_vocabularies["words"]
    text = "시민들 사이에서는 불만이 나오고 있다. 친구가 회사에서 일해요"
    pieces = m.detokenize(m(text))
    assert pieces == [
        *("시", "##민", "##들", "사이", "##에서", "##는", "불", "##만", "##이"),
        *("나오", "##고", "있", "##다", "."),
        *("친구", "##가", "회사", "##에서", "일", "##해", "##요"),
    ]
    # Learnt on words, pieces run across the particles (사이에서는 ends in
    # ##에서는, 회사에서 is one piece); on morphemes no piece does.
    words = plain.detokenize(plain(text))
    assert "##에서는" in words and "회사에서" in words
    particles = ("은", "는", "이", "가", "을", "를", "에서", "으로")
    learnt = [t for t in m.vocabulary if len(t.removeprefix("##")) > 2]
    joined = [t for t in plain.vocabulary if len(t.removeprefix("##")) > 2]
    ends = [t for t in learnt if t.endswith(particles)]
    assert len(ends) < len([t for t in joined if t.endswith(particles)]) / 4
    for particle in ("는", "은", "이", "가", "을", "를", "에서"):
        assert f"##{particle}" in m.vocabulary


@needs_kiwi
def test_byte_level_bpe_on_morphemes_never_merges_across_them(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    paths = {
        how: train_bpe.train_byte_level_bpe(
            [str(KOREAN)], 2000, tmp_path / how / "vocab.json", pre_tokenize=how
        )
        for how in ("morphemes", "words")
    }
    text = "서울시는 요금을 올린다고 밝혔다. 시민들 사이에서는"
    shown = {}
    for how, path in paths.items():
        tokenizer = ByteLevelBPETokenizer(path)  # the plain tokenizer either way
        shown[how] = [train_bpe.readable(t) for t in tokenizer.detokenize(tokenizer(text))]
    assert shown["morphemes"] == [
        *("서울", "시", "는", "Ġ요금", "을", "Ġ올린", "다고", "Ġ밝혔", "다", "."),
        *("Ġ시", "민", "들", "Ġ사이", "에서", "는"),
    ]
    assert "시는" in shown["words"] and "에서는" in shown["words"]
    assert "에서" in shown["morphemes"] and "에서는" not in shown["morphemes"]


def test_missing_analyser_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(morphemes.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(morphemes.MorphemeAnalyzerMissingError, match="pip install") as e:
        morphemes.check_available()
    assert "\n" not in str(e.value) and "kiwipiepy>=0.20" in str(e.value)
    monkeypatch.setitem(__import__("sys").modules, "kiwipiepy", None)  # import fails
    morphemes.analyzer.cache_clear()
    try:
        command = ["train-vocab", str(KOREAN), "--output", str(tmp_path / "v.txt")]
        assert cli.main([*command, "--pre-tokenize", "morphemes", "--no-lowercase"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and 'pip install "kiwipiepy>=0.20"' in err, err
        assert not (tmp_path / "v.txt").exists()
    finally:
        morphemes.analyzer.cache_clear()
    with pytest.raises(Exception, match="pre_tokenize must be one of words, morphemes"):
        train.train_wordpiece([str(KOREAN)], 100, pre_tokenize="syllables")


def test_morphemes_only_for_kinds_that_look_pieces_up_in_words(tmp_path, capsys):
    command = ["train-vocab", str(KOREAN), "--pre-tokenize", "morphemes"]
    for kind in ("sentencepiece", "fairseq_sentencepiece"):
        output = tmp_path / f"{kind}.model"
        assert cli.main([*command, "--kind", kind, "--output", str(output)]) == 2
        err = capsys.readouterr().err
        assert "--pre-tokenize morphemes is supported for --kind wordpiece and" in err
        assert err.count("\n") == 1
