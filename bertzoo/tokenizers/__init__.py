"""Tokenizers: reference-exact WordPiece (BERT), SentencePiece (ALBERT) and
byte-level BPE (RoBERTa) and XLM-R's SentencePiece with fairseq ids, in
TensorFlow ops, and vocabulary training for each of them (WordPiece and
byte-level BPE optionally on Korean morphemes).

The names below are imported on first use (PEP 562, `bertzoo.lazy`), so the
pure-Python parts (`basic`, the specification tokenizer; `corpus_stream`,
the corpus reading and word counting of vocabulary training) import without
TensorFlow: vocabulary training's word-counting processes start in a
fraction of a second, and hold no TensorFlow.
"""

from bertzoo.lazy import lazy_exports

_EXPORTS = {
    "BertTokenizer": "bertzoo.tokenizers.wordpiece",
    "ByteLevelBPETokenizer": "bertzoo.tokenizers.byte_bpe",
    "SentencePieceTokenizer": "bertzoo.tokenizers.sentencepiece",
    "Tokenizer": "bertzoo.tokenizers.base",
    "TokenizerError": "bertzoo.tokenizers.kinds",
    "XLMRobertaTokenizer": "bertzoo.tokenizers.fairseq",
    "from_preset": "bertzoo.tokenizers.base",
    "register_tokenizer": "bertzoo.tokenizers.base",
    "tokenizer_class": "bertzoo.tokenizers.kinds",
    "tokenizer_kinds": "bertzoo.tokenizers.kinds",
    "train_byte_level_bpe": "bertzoo.tokenizers.train_bpe",
    "train_fairseq_sentencepiece": "bertzoo.tokenizers.train",
    "train_sentencepiece": "bertzoo.tokenizers.train",
    "train_wordpiece": "bertzoo.tokenizers.train",
}
_SUBMODULES = (
    "base",
    "basic",
    "byte_bpe",
    "corpus_stream",
    "fairseq",
    "grapheme_tables",
    "hf_config",
    "hf_fast",
    "kinds",
    "morphemes",
    "sentencepiece",
    "train",
    "train_bpe",
    "unicode",
    "wordpiece",
    "wordpiece_learner",
)

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _SUBMODULES)
