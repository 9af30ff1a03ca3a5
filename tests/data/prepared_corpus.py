"""Corpora and a tokenizer for the preparation and shard tests: real
English sentences (the Python manual's help topics) and Korean reviews
(tests/fixtures/korean_corpus.txt), one sentence per line, blank lines
between documents."""

import string

from bertzoo.data.builtin_corpus import python_docs_corpus
from bertzoo.tokenizers import BertTokenizer
from tests.conftest import FIXTURES

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def korean_sentences():
    text = (FIXTURES / "korean_corpus.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def character_tokenizer():
    """WordPiece over single characters: ASCII letters, digits and
    punctuation, and the Hangul syllables of the Korean fixture (bare and
    as ## continuations). Emoji and other scripts are [UNK]."""
    chars = set(string.ascii_lowercase + string.digits)
    for sentence in korean_sentences():
        chars.update(c for c in sentence if "\uac00" <= c <= "\ud7a3")
    chars = sorted(chars)
    vocab = SPECIALS + chars + ["##" + c for c in chars] + list(string.punctuation)
    return BertTokenizer(vocab, lowercase=True, strip_accents=False)


def mixed_documents(num_documents, seed=0):
    """Documents (lists of sentences) alternating English manual sections
    and groups of Korean reviews, repeated as needed."""
    import random

    rng = random.Random(seed)
    english = [d for d in python_docs_corpus() if len(d) >= 2]
    korean = korean_sentences()
    documents = []
    for i in range(num_documents):
        if i % 3 == 2:
            k = rng.randrange(len(korean) - 6)
            documents.append(korean[k : k + rng.randint(2, 6)])
        else:
            doc = english[rng.randrange(len(english))]
            documents.append(doc[: rng.randint(2, 12)])
    return documents


def write_documents(path, documents, newline="\n"):
    text = (newline * 2).join(newline.join(doc) for doc in documents) + newline
    path.write_bytes(text.encode("utf-8"))
    return path
