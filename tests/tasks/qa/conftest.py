from tests.data.conftest import numbered_tokenizer

__all__ = ["numbered_tokenizer"]  # fixtures used here
