"""Tokenizers: reference-exact WordPiece (BERT) and SentencePiece (ALBERT),
in TensorFlow ops, and vocabulary training."""

from bertzoo.tokenizers.base import Tokenizer, TokenizerError, from_preset
from bertzoo.tokenizers.wordpiece import BertTokenizer

__all__ = ["BertTokenizer", "Tokenizer", "TokenizerError", "from_preset"]
