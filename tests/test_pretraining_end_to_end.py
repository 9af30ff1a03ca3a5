"""Korean corpus -> trained vocabulary -> SOP examples with whole-word
masking -> BertPretrainer (ALBERT-shaped) -> fit: masked-LM accuracy rises,
and the trained backbone + vocabulary load back as a preset for embedding."""

import numpy as np
import pytest

import bertzoo
from bertzoo.data import (
    MaskedLMMasker,
    create_examples,
    make_pretraining_dataset,
    read_corpus,
    tokenize_documents,
)
from bertzoo.tokenizers import train_wordpiece
from bertzoo.training import make_optimizer
from tests.conftest import FIXTURES

SEQ, PREDICTIONS, BATCH = 32, 5, 16


@pytest.mark.slow
def test_korean_pretraining_end_to_end(tmp_path):
    # Ten sentences a document, blank lines between documents.
    lines = (FIXTURES / "korean_corpus.txt").read_text(encoding="utf-8").splitlines()
    lines = [line for line in lines if line.strip()]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n\n".join("\n".join(lines[i : i + 10]) for i in range(0, len(lines), 10)) + "\n",
        encoding="utf-8",
    )
    vocab = train_wordpiece([corpus], vocab_size=1000, lowercase=False, strip_accents=False)
    tokenizer = bertzoo.BertTokenizer(vocab, lowercase=False, strip_accents=False)

    documents = tokenize_documents(read_corpus(corpus), tokenizer)
    assert len(documents) == -(-len(lines) // 10)
    examples = create_examples(
        documents, tokenizer, seq_len=SEQ, objective="sop", dupe_factor=2, seed=7
    )
    masker = MaskedLMMasker(tokenizer, SEQ, PREDICTIONS, kind="whole_word")
    train = make_pretraining_dataset(examples, BATCH, masker, seed=1, repeat=True)
    held_out = make_pretraining_dataset(examples, BATCH, masker, seed=2, shuffle=False).take(8)

    backbone = bertzoo.BertBackbone(
        vocabulary_size=tokenizer.vocabulary_size,
        num_layers=2,
        num_heads=4,
        hidden_dim=32,
        intermediate_dim=64,
        embedding_dim=16,
        num_groups=1,
        max_sequence_length=SEQ,
        dropout=0.0,
    )
    model = bertzoo.BertPretrainer(backbone, objective="sop")
    steps = 150
    model.compile(optimizer=make_optimizer("lamb", 5e-3, total_steps=steps, warmup_steps=10))
    before = model.evaluate(held_out, return_dict=True, verbose=0)
    model.fit(train, steps_per_epoch=steps, epochs=1, verbose=0)
    after = model.evaluate(held_out, return_dict=True, verbose=0)
    # A vocabulary of 1000: chance is ~0.001; whole words of a small
    # repetitive corpus are learnable in 150 steps.
    assert before["masked_lm_accuracy"] < 0.1
    assert after["masked_lm_accuracy"] > before["masked_lm_accuracy"] + 0.15
    assert after["loss"] < before["loss"]

    # The trained backbone and its vocabulary are a preset directory.
    out = tmp_path / "preset"
    backbone.preset_info = {
        "tokenizer": {"kind": "wordpiece", "lowercase": False, "strip_accents": False}
    }
    backbone.save_to_preset(out)
    tokenizer.save_to_preset(out)
    embedder = bertzoo.TextEmbedder.from_preset(out, sequence_length=SEQ)
    vectors = embedder.embed(["이 원피스 예뻐요", "가방이 예뻐서 샀어요"])
    assert vectors.shape == (2, 32) and np.all(np.isfinite(vectors))
    pieces = embedder.preprocessor.tokenizer.detokenize(
        embedder.preprocessor.tokenizer("이 원피스 예뻐요")
    )
    assert "[UNK]" not in pieces
