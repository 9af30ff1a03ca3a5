"""Pre-training with NSP or SOP warns, in one line and before training,
when most documents of its corpus hold one sentence (a file with a blank
line after every line: each line is then a document), and says what to do
instead; masked LM alone, or a corpus of real documents, is quiet."""

import logging

import pytest

from bertzoo.data.prepare import PrepareSettings, prepare_corpus
from bertzoo.training.pretrain_data import warn_one_sentence_documents
from tests.data.prepared_corpus import character_tokenizer, mixed_documents, write_documents

pytestmark = pytest.mark.backend_independent  # counts and a log line


def _warnings(caplog, objective, summary):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bertzoo"):
        warn_one_sentence_documents(objective, summary)
    return [r.getMessage() for r in caplog.records]


@pytest.fixture(scope="module")
def tokenizer():
    return character_tokenizer()


def _prepared_summary(tmp_path, documents, tokenizer):
    path = write_documents(tmp_path / "corpus.txt", documents)
    document = prepare_corpus([path], tokenizer, tmp_path / "prepared", PrepareSettings(workers=1))
    return document["summary"]


def test_a_corpus_of_one_line_documents_warns_for_sentence_pairs(tmp_path, tokenizer, caplog):
    # A law text as real files often hold it: a blank line after every line,
    # a few real multi-line documents among them (mixed scripts and emoji).
    documents = [[line] for doc in mixed_documents(40, seed=2) for line in doc]
    documents += [["제1조 (목적) 이 법은 🙂 ok"], ["Ã©tÃ© mojibake, 数字 42"]]
    documents += mixed_documents(5, seed=3)
    summary = _prepared_summary(tmp_path, documents, tokenizer)
    single = sum(len(d) == 1 for d in documents)
    # The bound from the counts holds and is what the warning states.
    bound = 2 * summary["documents"] - summary["sentences"]
    assert summary["documents"] == len(documents) and 2 * bound > len(documents)
    assert bound <= single
    for objective in ("sop", "nsp"):
        (line,) = _warnings(caplog, objective, summary)
        assert line.startswith(
            f"At least {bound} of the corpus's {len(documents)} documents hold one sentence"
        ), line
        assert f"objective {objective} pairs" in line and "--objective none" in line, line
        assert "\n" not in line
    # Masked LM alone (and ELECTRA) does not pair sentences: nothing to say.
    assert _warnings(caplog, "none", summary) == []
    assert _warnings(caplog, "electra", summary) == []


def test_real_documents_are_quiet(tmp_path, tokenizer, caplog):
    documents = mixed_documents(30, seed=4)  # 2 to 12 sentences each
    summary = _prepared_summary(tmp_path, documents, tokenizer)
    assert _warnings(caplog, "sop", summary) == []


def test_the_threshold_is_a_majority_of_one_sentence_documents(caplog):
    # 10 documents: 20 sentences allow none to hold one; 15 allow 5 (half,
    # quiet); 14 mean at least 6 do (a majority).
    assert _warnings(caplog, "sop", {"documents": 10, "sentences": 20}) == []
    assert _warnings(caplog, "sop", {"documents": 10, "sentences": 15}) == []
    (line,) = _warnings(caplog, "sop", {"documents": 10, "sentences": 14})
    assert line.startswith("At least 6 of the corpus's 10 documents hold one sentence")
    assert _warnings(caplog, "nsp", {"documents": 0, "sentences": 0}) == []


def test_the_run_s_data_warns_before_its_first_step(tmp_path, tokenizer, caplog):
    """The warning comes from the pre-training run's data (`PreparedData`,
    made before any step), on the counts of the corpus it trains from."""
    from types import SimpleNamespace

    from bertzoo.data.shards import open_prepared
    from bertzoo.training.pretrain import PretrainConfig
    from bertzoo.training.pretrain_data import PreparedData

    documents = [[line] for doc in mixed_documents(20, seed=5) for line in doc]
    path = write_documents(tmp_path / "corpus.txt", documents)
    prepare_corpus([path], tokenizer, tmp_path / "prepared", PrepareSettings(workers=1))
    config = PretrainConfig(
        preset="bert_tiny", prepared=str(tmp_path / "prepared"), seq_len=(32,), steps=(1,)
    )
    run = SimpleNamespace(config=config, output=tmp_path / "run")
    prepared = open_prepared(tmp_path / "prepared")
    for objective, expected in (("sop", 1), ("none", 0)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="bertzoo"):
            PreparedData(run, prepared, tokenizer, objective)
        lines = [r.getMessage() for r in caplog.records if "hold one sentence" in r.getMessage()]
        assert len(lines) == expected, caplog.text
