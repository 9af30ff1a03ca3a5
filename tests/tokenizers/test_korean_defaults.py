"""Korean cannot go silently wrong: accent stripping left to its default
keeps Hangul syllables whole (with a notice), asked for it warns with the
share of jamo tokens, `--show` makes jamo visible, and SentencePiece caps
its vocabulary size as WordPiece does. On tests/fixtures/korean_documents.txt
(345 sentences in 69 documents: news, daily life, reviews, science)."""

import logging
import unicodedata
from pathlib import Path

import pytest

from bertzoo import cli
from bertzoo.tokenizers import train
from bertzoo.tokenizers.sentencepiece import model_pieces

pytestmark = pytest.mark.backend_independent

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KOREAN = FIXTURES / "korean_documents.txt"
ENGLISH = (
    "The quick brown fox jumps over the lazy dog near the café.\n"
    "Naïve readers seldom notice the accents in résumé and façade.\n"
) * 30 + "The word 한국 appears once.\n"


def _jamo(text):
    return sum(train.is_conjoining_jamo(c) for c in text)


def _syllables(text):
    return sum(0xAC00 <= ord(c) <= 0xD7A3 for c in text)


def _train_vocab(args, capsys, caplog):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bertzoo"):
        status = cli.main(["train-vocab", *map(str, args)])
    out = capsys.readouterr()
    return status, out.out, out.err, caplog.records


def test_default_keeps_syllables_with_one_notice(tmp_path, capsys, caplog):
    output = tmp_path / "vocab.txt"
    status, out, err, records = _train_vocab(
        [KOREAN, "--vocab-size", "3000", "--output", output], capsys, caplog
    )
    assert status == 0, err
    notices = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert len(notices) == 1 and notices[0].startswith("Keeping Hangul syllables whole: ")
    assert "strip_accents=False" in notices[0] and "\n" not in notices[0]
    assert "(lowercase=True, strip_accents=False)" in out
    vocab = output.read_text(encoding="utf-8")
    assert _jamo(vocab) == 0 and _syllables(vocab) > 1000
    assert "서울시는 다음" in out and "\\u" not in out  # the preview has no jamo


def test_explicit_strip_accents_is_kept_and_warns_with_the_jamo_share(tmp_path, capsys, caplog):
    output = tmp_path / "vocab.txt"
    args = [KOREAN, "--strip-accents", "--vocab-size", "3000", "--output", output, "--show", "1"]
    status, out, err, records = _train_vocab(args, capsys, caplog)
    assert status == 0, err
    vocab = output.read_text(encoding="utf-8").splitlines()
    jamo = sum(1 for t in vocab if _jamo(t))
    assert jamo > len(vocab) / 2 and _syllables("".join(vocab)) == 0
    warnings = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    share = f"{jamo:,} of the {len(vocab):,} tokens ({100 * jamo / len(vocab):.0f}%) hold jamo"
    assert share in warnings[0] and "--no-strip-accents" in warnings[0]
    assert "(lowercase=True, strip_accents=True)" in out
    # The preview shows the jamo escaped, not drawn as the syllables they
    # compose on a terminal, and says what the escapes are.
    preview = out.split("-> ", 1)[1].splitlines()[0]
    assert preview.startswith("\\u1109 ##\\u1165 ##\\u110b") and _jamo(preview) == 0
    assert "(\\uXXXX: a conjoining jamo or combining mark" in out


def test_mostly_english_corpus_keeps_the_reference_default(tmp_path, capsys, caplog):
    corpus = tmp_path / "en.txt"
    corpus.write_text(ENGLISH, encoding="utf-8")
    status, out, err, records = _train_vocab(
        [corpus, "--vocab-size", "300", "--output", tmp_path / "v.txt"], capsys, caplog
    )
    assert status == 0, err
    assert "strip_accents=True" in out  # 1 Hangul word of 661: under 1%
    assert not any("Keeping Hangul" in r.getMessage() for r in records)
    # Its two jamo-holding words are warned about, with their share.
    assert any("hold jamo" in r.getMessage() for r in records)


def test_visible_escapes_decomposed_characters():
    decomposed = unicodedata.normalize("NFD", "예뻐요 é")
    assert train.visible("예뻐요 é") == "예뻐요 é"
    assert train.visible(decomposed) == "\\u110b\\u1168\\u1108\\u1165\\u110b\\u116d e\\u0301"
    assert train.visible("ㅋㅋ") == "ㅋㅋ"  # compatibility jamo draw as themselves


def test_sentencepiece_caps_the_vocabulary_size_as_wordpiece_does(tmp_path, capsys, caplog):
    with caplog.at_level(logging.INFO, logger="bertzoo"):
        path = train.train_sentencepiece(
            KOREAN, 32000, tmp_path / "spiece.model", lowercase=False, strip_accents=False
        )
    pieces = model_pieces(path.read_bytes())
    assert 500 < len(pieces) < 32000
    assert f"SentencePiece vocabulary has {len(pieces)} pieces (asked for 32000)" in caplog.text
    # The command line says so in its report, for both kinds.
    for kind, name in (("sentencepiece", "spiece.model"), ("wordpiece", "vocab.txt")):
        args = [KOREAN, "--kind", kind, "--vocab-size", "32000", "--output", tmp_path / kind / name]
        status, out, err, _ = _train_vocab(args + ["--no-lowercase"], capsys, caplog)
        assert status == 0, err
        assert "tokens, not the 32000 asked for: the corpus has no more pieces" in out
    # A size the corpus fills is trained exactly, with no such note.
    args = [KOREAN, "--kind", "sentencepiece", "--vocab-size", "1000", "--no-lowercase"]
    status, out, err, _ = _train_vocab(args + ["--output", tmp_path / "s.model"], capsys, caplog)
    assert status == 0 and ": 1000 tokens (" in out, err
    # One too small for the corpus's characters is a one-line error, as with WordPiece.
    args[4] = "600"
    status, out, err, _ = _train_vocab(args + ["--output", tmp_path / "t.model"], capsys, caplog)
    assert status == 2 and err.strip().splitlines()[-1] == (
        "error: vocab_size=600 is too small: the special pieces and the corpus's characters "
        "(character_coverage=1.0) need at least 685."
    )


def test_pretraining_vocabulary_keeps_syllables_unless_told(tmp_path, caplog):
    from bertzoo.training.pretrain import PretrainConfig, prepare_tokenizer

    run = tmp_path / "run"
    config = PretrainConfig(preset="bert_tiny", vocab_size=2000, output=str(run))
    with caplog.at_level(logging.WARNING, logger="bertzoo"):
        tokenizer = prepare_tokenizer(config, run, [str(KOREAN)])
    assert "Keeping Hangul syllables whole" in caplog.text
    assert tokenizer.lowercase and not tokenizer.strip_accents
    assert tokenizer.detokenize(tokenizer("이 원피스 예뻐요"))[0] == "이"
    assert not tokenizer.preset_section()["strip_accents"]  # what the preset records
    # A resumed run reuses the vocabulary with the same setting.
    again = prepare_tokenizer(config, run, [str(KOREAN)])
    assert not again.strip_accents
    # Asked for, stripping is kept, with the jamo warning.
    caplog.clear()
    told = PretrainConfig(preset="bert_tiny", vocab_size=2000, strip_accents=True)
    with caplog.at_level(logging.WARNING, logger="bertzoo"):
        stripped = prepare_tokenizer(told, tmp_path / "told", [str(KOREAN)])
    assert stripped.strip_accents and "hold jamo" in caplog.text
    assert "Keeping Hangul" not in caplog.text


def test_the_look_at_the_corpus_reports_nothing_twice(tmp_path, capsys, caplog):
    corpus = tmp_path / "ko.txt"
    corpus.write_bytes(KOREAN.read_bytes() + b"\xff\xfe broken line\n")
    status, out, err, records = _train_vocab(
        [corpus, "--vocab-size", "3000", "--output", tmp_path / "v.txt", "--show", "0"],
        capsys,
        caplog,
    )
    assert status == 0, err
    messages = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert sum("not valid UTF-8" in m for m in messages) == 1, messages
    assert sum("Keeping Hangul" in m for m in messages) == 1, messages


def test_a_few_jamo_in_a_large_vocabulary_stay_quiet(caplog):
    words = [f"w{i}" for i in range(995)]
    jamo = ["\u1100", "##\u1161", "\u1112", "##\u1161", "##\u11ab"]
    with caplog.at_level(logging.WARNING, logger="bertzoo"):
        train._warn_jamo(words + jamo, strip_accents=True)  # 0.5% of the tokens
        assert caplog.records == []
        train._warn_jamo(words[:400] + jamo, strip_accents=True)  # 1.2%
    assert "5 of the 405 tokens (1%) hold jamo" in caplog.text
