import logging

import numpy as np
import pytest

from bertzoo import data
from bertzoo.tokenizers import BertTokenizer, train_wordpiece
from tests.conftest import FIXTURES

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent

KOREAN = str(FIXTURES / "korean_corpus.txt")


def test_sentences_and_documents_layouts(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("a b.\nc d.\n\n\nOne sentence doc.\n\ne f.\n  \ng h.\ni j.\n", encoding="utf-8")
    docs = data.read_corpus(path)
    # Whitespace-only lines separate documents too; one-sentence documents are kept.
    assert docs == [["a b.", "c d."], ["One sentence doc."], ["e f."], ["g h.", "i j."]]
    assert data.read_corpus(path, layout="documents") == [
        ["a b."],
        ["c d."],
        ["One sentence doc."],
        ["e f."],
        ["g h."],
        ["i j."],
    ]


def test_documents_do_not_span_files(tmp_path):
    (tmp_path / "a.txt").write_text("one.\ntwo.", encoding="utf-8")
    (tmp_path / "b.txt").write_text("three.\n", encoding="utf-8")
    assert data.read_corpus(str(tmp_path / "*.txt")) == [["one.", "two."], ["three."]]


def test_non_utf8_lines_replaced_and_counted(tmp_path, caplog):
    path = tmp_path / "bad.txt"
    path.write_bytes("좋아요.\n".encode() + b"bad \xff\xfe here.\n" + b"ok.\n\nalso \xc3 bad.\n")
    with caplog.at_level(logging.WARNING, logger="bertzoo.data"):
        docs = data.read_corpus(path)
    assert docs == [["좋아요.", "bad \ufffd\ufffd here.", "ok."], ["also \ufffd bad."]]
    records = [r for r in caplog.records if r.name == "bertzoo.data"]
    assert len(records) == 1  # one log line for the whole corpus
    assert "2 line(s)" in records[0].getMessage() and "bad.txt" in records[0].getMessage()


def test_empty_corpus_names_the_files(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n", encoding="utf-8")
    with pytest.raises(data.CorpusError, match="empty.*empty.txt"):
        data.read_corpus(empty)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt") as e:
        data.read_corpus([tmp_path / "nope.txt"])
    assert isinstance(e.value, data.CorpusError)
    with pytest.raises(FileNotFoundError, match=r"\*.none") as e:
        data.read_corpus(str(tmp_path / "*.none"))
    assert isinstance(e.value, data.CorpusError)


def test_tokenize_documents_drops_empty_sentences_and_documents(numbered_tokenizer):
    docs = [["w1 w2", "   ", "w3"], ["\u200b"], ["w4"]]
    out = data.tokenize_documents(docs, numbered_tokenizer)
    assert [[s.tolist() for s in d] for d in out] == [[[6, 7], [8]], [[9]]]
    assert all(s.dtype == np.int32 for d in out for s in d)
    with pytest.raises(data.CorpusError, match="empty"):
        data.tokenize_documents([["   "]], numbered_tokenizer)


def test_korean_corpus_tokenizes(tmp_path):
    vocab = train_wordpiece(
        [KOREAN], 1200, lowercase=False, strip_accents=False, output=tmp_path / "vocab.txt"
    )
    tokenizer = BertTokenizer(tmp_path / "vocab.txt", lowercase=False, strip_accents=False)
    docs = data.read_corpus(KOREAN, layout="documents")
    ids = data.tokenize_documents(docs, tokenizer, batch_size=64)  # several batches
    assert len(ids) == len(docs)
    flat = np.concatenate([s for d in ids for s in d])
    assert tokenizer.unk_token_id not in set(flat.tolist())  # the vocabulary covers its corpus
    assert flat.max() < len(vocab)


def test_a_file_named_like_a_glob_is_read_as_that_file(tmp_path):
    """`wiki[1].txt` names that file (as the shell's quoting would), not
    `wiki1.txt`, which the pattern would match."""
    (tmp_path / "wiki[1].txt").write_text("the bracketed file\n", encoding="utf-8")
    (tmp_path / "wiki1.txt").write_text("another file\n", encoding="utf-8")
    assert data.read_corpus(str(tmp_path / "wiki[1].txt")) == [["the bracketed file"]]
    assert data.corpus.expand_files([str(tmp_path / "wiki[1].txt")]) == [tmp_path / "wiki[1].txt"]
    # Without such a file, the pattern is still a pattern.
    (tmp_path / "wiki[1].txt").unlink()
    assert data.read_corpus(str(tmp_path / "wiki[1].txt")) == [["another file"]]
    assert data.corpus.expand_files([str(tmp_path / "wiki[1].txt")]) == [tmp_path / "wiki1.txt"]
