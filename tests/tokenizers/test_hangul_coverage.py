"""`include_hangul`: every syllable of a Hangul set in a trained vocabulary,
so a vocabulary trained on one domain (legal text here) does not turn the
syllables of another (shopping, food, slang) into [UNK]."""

import re

import numpy as np
import pytest
import tensorflow as tf

from bertzoo import cli
from bertzoo.tokenizers import BertTokenizer, SentencePieceTokenizer, train
from bertzoo.tokenizers.base import TokenizerError
from bertzoo.tokenizers.basic import BasicTokenizer, tokenize_to_pieces, wordpiece
from bertzoo.tokenizers.sentencepiece import model_pieces
from bertzoo.training.pretrain import (
    PretrainConfig,
    PretrainError,
    prepare_tokenizer,
    validate_config,
)
from bertzoo.training.runs import config_from_args

# Vocabulary training, tokenizers and settings: nothing goes through keras.ops.
pytestmark = pytest.mark.backend_independent

LEGAL = """\
제1조(목적) 이 법은 계약 당사자의 권리와 의무를 명확히 하여 거래의 안전을 보호함을 목적으로 한다.
제2조(정의) 이 법에서 사용하는 용어의 뜻은 다음과 같다.
제3조(적용 범위) 이 법은 대한민국 영역 안에서 체결된 모든 계약에 적용한다.
계약은 당사자 쌍방의 의사표시가 합치됨으로써 성립한다.
채무자가 채무의 내용에 좇은 이행을 하지 아니한 때에는 채권자는 손해배상을 청구할 수 있다.
손해배상은 다른 의사표시가 없으면 금전으로 그 손해를 배상한다.
민법 제750조에 따르면 고의 또는 과실로 인한 위법행위로 타인에게 손해를 가한 자는 그 손해를 배상할 책임이 있다.
원고는 피고에게 금 5,000,000원 및 이에 대한 지연손해금을 지급하라는 판결을 구하였다.
피고는 원고의 청구를 기각한다는 판결을 구하였다.
법원은 당사자가 신청하지 아니한 사항에 대하여는 판결하지 못한다.
소송비용은 패소한 당사자가 부담한다.
항소는 판결서가 송달된 날부터 2주 이내에 제기하여야 한다.
상고심은 법률심으로서 원심판결의 법령 위반 여부만을 심사한다.
임대인은 임차인에게 목적물을 인도하고 계약 존속 중 그 사용, 수익에 필요한 상태를 유지하게 할 의무를 부담한다.
임차인은 약정한 차임을 지급할 의무가 있다.
임대차 기간이 만료된 때에는 임차인은 목적물을 원상회복하여 반환하여야 한다.
보증금 반환 채무와 목적물 반환 채무는 동시이행의 관계에 있다.
근로계약은 근로자가 사용자에게 근로를 제공하고 사용자는 이에 대하여 임금을 지급하는 것을 목적으로 체결된 계약을 말한다.
사용자는 근로자를 정당한 이유 없이 해고하지 못한다.
해고를 하려면 적어도 30일 전에 예고를 하여야 한다.
누구든지 법률에 의하지 아니하고는 체포, 구속, 압수, 수색 또는 심문을 받지 아니한다.
모든 국민은 법 앞에 평등하다.
범죄의 성립과 처벌은 행위 시의 법률에 의한다.
피고인은 유죄의 판결이 확정될 때까지는 무죄로 추정된다.
형법 제268조는 업무상 과실로 사람을 사상에 이르게 한 자를 처벌한다.
검사는 범죄의 혐의가 있다고 사료하는 때에는 범인, 범죄사실과 증거를 수사한다.
증거의 증명력은 법관의 자유판단에 의한다.
본 계약의 해석에 관하여 분쟁이 발생한 경우 서울중앙지방법원을 제1심 관할법원으로 한다.
당사자는 이 계약에 따른 권리를 상대방의 서면 동의 없이 제3자에게 양도할 수 없다.
이 계약은 2024년 1월 1일부터 효력이 발생하며 계약 기간은 1년으로 한다.
개인정보처리자는 정보주체의 동의를 받은 경우에만 개인정보를 수집할 수 있다.
개인정보의 보유 기간이 경과한 때에는 지체 없이 그 개인정보를 파기하여야 한다.
행정청은 처분을 하는 때에는 당사자에게 그 근거와 이유를 제시하여야 한다.
처분에 이의가 있는 자는 처분이 있음을 안 날부터 90일 이내에 행정심판을 청구할 수 있다.
상속인은 상속이 개시된 때부터 피상속인의 재산에 관한 포괄적 권리의무를 승계한다.
회사는 상법에 따라 설립된 영리를 목적으로 하는 법인을 말한다.
이사는 법령과 정관에 따라 회사를 위하여 그 직무를 충실하게 수행하여야 한다.
주주총회의 결의는 출석한 주주의 의결권의 과반수로써 하여야 한다.
"""
# Out of the legal domain: shopping reviews, food, slang, with English,
# emoji, numbers and punctuation the legal text lacks.
OUT_OF_DOMAIN = [
    "이 원피스 색깔이 너무 예뻐요 😍",
    "배송이 빨라서 좋았어요! 다음에 또 살게요.",
    "떡볶이랑 튀김 세트 2인분 주문했는데 양이 푸짐해요",
    "치킨은 역시 반반이 진리 ㅋㅋㅋ",
    "아이폰 15 케이스 샀는데 핏이 딱 맞아요",
    "오늘 점심은 김치찌개랑 계란말이 먹었어요",
    "쿠폰 적용하니까 3,900원 할인됐어요 개이득",
    "NewJeans 앨범 언박싱 했는데 포카 대박",
    "마라탕 맵기 3단계는 너무 매워요 🌶️",
    "편의점 신상 디저트 존맛탱",
    "택배 기사님 감사합니다 :)",
    "사이즈 교환 요청했는데 답변이 없네요",
]
RARE = "똠얌꿍 뷁"  # 똠 and 뷁 are outside KS X 1001's 2,350 syllables
SIZE = 5000
CASED = dict(lowercase=False, strip_accents=False)
COMMON = train.hangul_syllables("common")
BASIC = BasicTokenizer(**CASED)


def is_syllable(char):
    return 0xAC00 <= ord(char) <= 0xD7A3


def all_words(texts):
    """The words of `texts`, as BertTokenizer splits them."""
    return [w for text in texts for w in BASIC.tokenize(text)]


def hangul_words(texts):
    """The words (as BertTokenizer splits them) written only in syllables."""
    return [w for w in all_words(texts) if all(map(is_syllable, w))]


def unk_rate(vocabulary, words, unk="[UNK]"):
    """The share of the words WordPiece turns into [UNK]."""
    vocabulary = set(vocabulary)
    return sum(unk in wordpiece(word, vocabulary, unk) for word in words) / len(words)


def as_lists(ids):
    if isinstance(ids, tf.RaggedTensor):
        return ids.to_list()
    return [np.asarray(row).tolist() for row in ids]


@pytest.fixture(scope="module")
def legal(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "legal.txt"
    path.write_text(LEGAL, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def plain_vocab(legal):
    return train.train_wordpiece(legal, SIZE, **CASED)


@pytest.fixture(scope="module")
def common_vocab(legal, tmp_path_factory):
    output = tmp_path_factory.mktemp("wp") / "vocab.txt"
    vocab = train.train_wordpiece(legal, SIZE, output=output, include_hangul="common", **CASED)
    return vocab, output


def test_hangul_syllable_sets():
    everything = train.hangul_syllables("all")
    assert len(COMMON) == 2350 and len(everything) == 11172
    assert everything[0] == "가" and everything[-1] == "힣"
    assert COMMON == sorted(COMMON) and set(COMMON) < set(everything)
    # KS X 1001: the syllables EUC-KR writes in two bytes (the codec writes
    # the others as 8-byte jamo composition sequences).
    assert COMMON == [c for c in everything if len(c.encode("euc_kr")) == 2]
    assert {"가", "각", "힝", "햏"} - set(COMMON) == {"햏"}
    assert train.hangul_syllables(None) == train.hangul_syllables("none") == []
    with pytest.raises(TokenizerError, match="include_hangul must be one of none, common, all"):
        train.hangul_syllables("ksx1001")


def test_out_of_domain_korean_is_unknown_without_the_option(plain_vocab):
    # docs/korean.md's description of the data: 38 legal sentences using 204
    # syllables; 12 out-of-domain sentences.
    legal = [line for line in LEGAL.splitlines() if line.strip()]
    assert len(legal) == 38 and len({c for c in LEGAL if is_syllable(c)}) == 204
    assert len(OUT_OF_DOMAIN) == 12
    words = hangul_words(OUT_OF_DOMAIN)
    assert len(plain_vocab) < SIZE  # the small corpus has no more pieces
    assert not set(COMMON) <= set(plain_vocab)
    # docs/korean.md's table (Hangul coverage): 507 tokens; 48 of the 57
    # Hangul words and 54 of all 71 words are [UNK].
    assert len(words) == 57 and unk_rate(plain_vocab, words) == pytest.approx(48 / 57)
    assert len(plain_vocab) == 507
    every_word = all_words(OUT_OF_DOMAIN)
    assert len(every_word) == 71 and unk_rate(plain_vocab, every_word) == pytest.approx(54 / 71)


def test_common_syllables_cover_out_of_domain_korean(legal, plain_vocab, common_vocab):
    vocab, path = common_vocab
    assert len(vocab) <= SIZE and len(set(vocab)) == len(vocab)
    assert path.read_text(encoding="utf-8") == "".join(t + "\n" for t in vocab)
    for syllable in COMMON:
        assert syllable in vocab and "##" + syllable in vocab
    # Layout: the reserved tokens and the corpus's characters as before, then
    # the set's missing syllables (word starts, then continuations), then the
    # learnt pieces; with room left (the learner is given SIZE minus the
    # added tokens), every piece learnt without the option is kept.
    alphabet = {c for t in plain_vocab[5:] for c in t.removeprefix("##")}
    head = 5 + 2 * sum(len(t) == 1 for t in plain_vocab[5:])
    assert vocab[:head] == plain_vocab[:head] and len(alphabet) == (head - 5) // 2
    missing = [c for c in COMMON if c not in alphabet]
    added = vocab[head : head + 2 * len(missing)]
    assert added == missing + ["##" + c for c in missing]
    assert vocab[head + len(added) :] == plain_vocab[head:]
    again = train.train_wordpiece(legal, SIZE, include_hangul="common", **CASED)
    assert again == vocab  # deterministic
    assert unk_rate(vocab, hangul_words(OUT_OF_DOMAIN)) == 0.0
    # docs/korean.md's table: 4,799 tokens; 6 of the 71 words stay [UNK] (emoji,
    # English, punctuation, compatibility jamo).
    assert len(vocab) == 4799 and unk_rate(vocab, all_words(OUT_OF_DOMAIN)) == pytest.approx(6 / 71)
    # The trade-off of "common": a syllable outside the set is still [UNK].
    assert unk_rate(vocab, hangul_words([RARE])) == 1.0


def test_bert_tokenizer_round_trip(common_vocab):
    vocab, path = common_vocab
    tokenizer = BertTokenizer(path, **CASED)
    basic = BASIC
    for text, ids in zip(OUT_OF_DOMAIN, as_lists(tokenizer(OUT_OF_DOMAIN)), strict=True):
        pieces = tokenizer.detokenize(ids)
        assert pieces == tokenize_to_pieces(text, set(vocab), basic)  # the specification
        assert [tokenizer.token_to_id(p) for p in pieces] == ids
        words = basic.tokenize(text)
        for word, joined in zip(words, " ".join(pieces).replace(" ##", "").split(), strict=True):
            # Every Hangul word comes back whole; [UNK] only for words with a
            # character the vocabulary lacks (emoji, English, "ㅋ", "!").
            assert joined == word or (joined == "[UNK]" and not all(map(is_syllable, word)))
    ids = as_lists(tokenizer(["떡볶이 존맛탱 개이득"]))[0]
    assert tokenizer.detokenize(ids) == [
        "떡",
        "##볶",
        "##이",
        "존",
        "##맛",
        "##탱",
        "개",
        "##이",
        "##득",
    ]


def test_all_syllables_and_lowercase(legal):
    vocab = train.train_wordpiece(legal, 23000, include_hangul="all", **CASED)
    assert 22344 < len(vocab) <= 23000
    assert unk_rate(vocab, hangul_words(OUT_OF_DOMAIN + [RARE])) == 0.0
    # lowercase=True does not change Hangul; strip_accents=False keeps it whole.
    lowered = train.train_wordpiece(
        legal, SIZE, lowercase=True, strip_accents=False, include_hangul="common"
    )
    assert len(lowered) <= SIZE and {"##" + c for c in COMMON} <= set(lowered)
    tokenizer = BertTokenizer(lowered, lowercase=True, strip_accents=False)
    ids = as_lists(tokenizer(["NEWJEANS 떡볶이 존맛탱"]))[0]
    assert tokenizer.detokenize(ids)[1:] == ["떡", "##볶", "##이", "존", "##맛", "##탱"]


def test_accent_stripping_adds_the_jamo(legal):
    """The uncased default (NFD) decomposes syllables into jamo, so the 67
    modern jamo are added, both ways, instead of the syllables."""
    plain = train.train_wordpiece(legal, 2000)  # lowercase, strip_accents follows it
    vocab = train.train_wordpiece(legal, 2000, include_hangul="common")
    assert train.train_wordpiece(legal, 2000, include_hangul="all") == vocab
    assert len(vocab) <= 2000 and not any(is_syllable(c) for t in vocab for c in t)
    jamo = {c for t in vocab if len(t.removeprefix("##")) == 1 for c in t.removeprefix("##")}
    jamo = {c for c in jamo if 0x1100 <= ord(c) <= 0x11FF}
    assert len(jamo) == 67 and all(c in vocab and "##" + c in vocab for c in jamo)
    tokenizer = BertTokenizer(vocab)  # lowercase=True, strip_accents=None
    plain_tokenizer = BertTokenizer(plain)
    words = hangul_words(OUT_OF_DOMAIN + [RARE])
    ids = as_lists(tokenizer(words))
    assert all(tokenizer.unk_token_id not in row for row in ids)
    assert any(plain_tokenizer.unk_token_id in row for row in as_lists(plain_tokenizer(words)))


def test_too_small_vocab_size(legal):
    with pytest.raises(TokenizerError, match="too small for include_hangul='common'") as error:
        train.train_wordpiece(legal, 4000, include_hangul="common", **CASED)
    message = str(error.value)
    assert isinstance(error.value, ValueError) and "\n" not in message
    minimum = int(re.search(r"need at least (\d+)\.$", message).group(1))
    assert len(train.train_wordpiece(legal, minimum, include_hangul="common", **CASED)) <= minimum
    with pytest.raises(TokenizerError, match=f"need at least {minimum}"):
        train.train_wordpiece(legal, minimum - 1, include_hangul="common", **CASED)
    with pytest.raises(TokenizerError, match="include_hangul must be one of"):
        train.train_wordpiece(legal, SIZE, include_hangul="yes")


def test_sentencepiece_required_chars(legal, tmp_path):
    # sentencepiece's required_chars: each syllable is a piece (counted in
    # vocab_size), whether or not the corpus has it; also through ALBERT's
    # accent stripping, which the model's nmt_nfkc normaliser undoes.
    for strip_accents in (False, True):
        path = train.train_sentencepiece(
            legal,
            2420,
            tmp_path / f"strip{strip_accents}",
            lowercase=False,
            strip_accents=strip_accents,
            include_hangul="common",
        )
        pieces = set(model_pieces(path.read_bytes()))
        assert len(pieces) == 2420 and set(COMMON) <= pieces
        tokenizer = SentencePieceTokenizer(path, lowercase=False, strip_accents=strip_accents)
        for row in as_lists(tokenizer(hangul_words(OUT_OF_DOMAIN))):
            assert tokenizer.unk_token_id not in row
    plain = train.train_sentencepiece(legal, 300, tmp_path / "plain", **CASED)
    tokenizer = SentencePieceTokenizer(plain, **CASED)
    rows = as_lists(tokenizer(hangul_words(OUT_OF_DOMAIN)))
    assert sum(tokenizer.unk_token_id in row for row in rows) == 48  # of 57, as docs/korean.md says
    with pytest.raises(
        TokenizerError, match=r"too small for include_hangul='common'.*at least \d+"
    ):
        train.train_sentencepiece(legal, 2000, tmp_path / "small", include_hangul="common")


def test_cli_include_hangul(legal, tmp_path, capsys):
    output = tmp_path / "vocab.txt"
    command = ["train-vocab", str(legal), "--output", str(output), "--vocab-size", str(SIZE)]
    command += ["--no-lowercase", "--no-strip-accents", "--show", "0"]
    assert cli.main(command + ["--include-hangul", "common"]) == 0
    vocab = output.read_text(encoding="utf-8").splitlines()
    assert len(vocab) <= SIZE and {"##" + c for c in COMMON} <= set(vocab)
    assert "Wrote" in capsys.readouterr().out
    small = command[:5] + ["1000"] + command[6:] + ["--overwrite", "--include-hangul", "common"]
    assert cli.main(small) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "need at least" in error[0]
    with pytest.raises(SystemExit):
        cli.main(command + ["--include-hangul", "some"])
    assert "invalid choice: 'some'" in capsys.readouterr().err


def test_pretrain_setting(legal, tmp_path):
    from recipes.pretrain import build_parser

    validate_config(PretrainConfig(include_hangul="common"))
    assert PretrainConfig().include_hangul == "none"
    assert "include_hangul" in PretrainConfig.compared_settings()
    with pytest.raises(PretrainError, match="include_hangul='ksx' is not valid"):
        validate_config(PretrainConfig(include_hangul="ksx"))
    args = build_parser().parse_args(["--include-hangul", "common"])
    assert config_from_args(PretrainConfig, args).include_hangul == "common"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--include-hangul", "ksx"])
    # The run's vocabulary training gets the setting.
    config = PretrainConfig(include_hangul="common", vocab_size=SIZE, **CASED)
    tokenizer = prepare_tokenizer(config, tmp_path, [str(legal)])
    assert tokenizer.vocabulary_size <= SIZE
    assert {"##" + c for c in COMMON} <= set(tokenizer.vocabulary)
