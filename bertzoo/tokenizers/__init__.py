"""Tokenizers: reference-exact WordPiece (BERT) and SentencePiece (ALBERT),
in TensorFlow ops, and vocabulary training."""

from bertzoo.tokenizers.base import Tokenizer, from_preset, register_tokenizer
from bertzoo.tokenizers.kinds import TokenizerError, tokenizer_class, tokenizer_kinds
from bertzoo.tokenizers.sentencepiece import SentencePieceTokenizer
from bertzoo.tokenizers.train import train_sentencepiece, train_wordpiece
from bertzoo.tokenizers.wordpiece import BertTokenizer

__all__ = [
    "BertTokenizer",
    "SentencePieceTokenizer",
    "Tokenizer",
    "TokenizerError",
    "from_preset",
    "register_tokenizer",
    "tokenizer_class",
    "tokenizer_kinds",
    "train_sentencepiece",
    "train_wordpiece",
]
