import pytest

from bertzoo.tokenizers import BertTokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
NUM_WORDS = 3000


@pytest.fixture(scope="session")
def numbered_tokenizer():
    """Vocabulary: specials, then w0..w2999 (id = 5 + number), then a few
    pieces for whole-word tests: 'x' '##y' '##z'."""
    return BertTokenizer(SPECIALS + [f"w{i}" for i in range(NUM_WORDS)] + ["x", "##y", "##z"])
