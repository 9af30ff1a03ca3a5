"""`--corpus-layout documents` (one document per line) and the sentence
tasks (issue 30, hole 4): each line was one "sentence", so every NSP/SOP
example took a random B (300 of 300 labels were 1, and the run reported
`final_nsp_accuracy: 1.0`). Now NSP and SOP -- also as `auto` picks them --
are refused for that layout before anything is written, and the masked-LM
path packs long documents into full sequences, using all of the text (it
kept each document's first sequence only: 45% of the tokens at 128)."""

import numpy as np
import pytest

import bertzoo
from bertzoo.data.builtin_corpus import python_docs_corpus
from bertzoo.data.corpus import read_corpus, tokenize_documents
from bertzoo.data.prepare import PrepareSettings, prepare_corpus
from bertzoo.data.shards import pack_full_sentences
from bertzoo.tokenizers.train import train_wordpiece
from bertzoo.training.pretrain import PretrainConfig, PretrainError, run_pretraining
from bertzoo.training.pretrain_config import check_positions

pytestmark = pytest.mark.backend_independent

SMALL = dict(
    preset="bert_tiny",
    seq_len=(32,),
    steps=(4,),
    batch_size=4,
    checkpoint_every=2,
    eval_batches=1,
    verbose=0,
)


@pytest.fixture(scope="module")
def documents_corpus(tmp_path_factory):
    """The Python help topics, one document per line, and a vocabulary."""
    d = tmp_path_factory.mktemp("documents")
    (d / "docs.txt").write_text(
        "\n".join(" ".join(doc) for doc in python_docs_corpus()) + "\n", encoding="utf-8"
    )
    train_wordpiece([d / "docs.txt"], 2000, min_frequency=1, output=d / "vocab.txt")
    return d


@pytest.mark.parametrize(
    "objective, which",
    [("nsp", "objective nsp trains"), ("sop", "objective sop trains"), ("auto", "(what auto")],
)
def test_sentence_tasks_are_refused_for_one_document_per_line(
    tmp_path, documents_corpus, objective, which
):
    out = tmp_path / "run"
    config = PretrainConfig(
        **SMALL,
        corpus=(str(documents_corpus / "docs.txt"),),
        vocab=str(documents_corpus / "vocab.txt"),
        corpus_layout="documents",
        objective=objective,
        output=str(out),
    )
    with pytest.raises(PretrainError) as e:
        run_pretraining(config)
    message = str(e.value)
    assert which in message and "--corpus-layout documents" in message, message
    assert "--objective none" in message and "--corpus-layout sentences" in message
    assert "\n" not in message
    assert not out.exists()  # nothing written


def test_a_documents_corpus_prepared_beforehand_is_refused_too(tmp_path, documents_corpus):
    tokenizer = bertzoo.BertTokenizer(documents_corpus / "vocab.txt")
    prepared = tmp_path / "prepared"
    prepare_corpus(
        [documents_corpus / "docs.txt"],
        tokenizer,
        prepared,
        PrepareSettings(layout="documents", workers=1),
    )
    config = PretrainConfig(**SMALL, prepared=str(prepared), objective="sop", output="unused")
    with pytest.raises(PretrainError, match=r"--prepared .* was prepared with --corpus-layout doc"):
        check_positions(config)
    check_positions(PretrainConfig(**SMALL, prepared=str(prepared), objective="none"))


def test_masked_lm_alone_is_accepted_and_doc_sentences_packing_is_refused(documents_corpus):
    base = dict(SMALL, corpus=(str(documents_corpus / "docs.txt"),), corpus_layout="documents")
    for objective in ("none", "electra"):
        check_positions(PretrainConfig(**base, objective=objective))
    with pytest.raises(PretrainError, match=r"--packing doc_sentences .* --packing auto"):
        check_positions(PretrainConfig(**base, objective="none", packing="doc_sentences"))


@pytest.mark.parametrize("seq_len", [32, 128, 512])
def test_full_sentence_packing_uses_all_of_a_documents_corpus(documents_corpus, seq_len):
    """Documents longer than a sequence used to keep only their first
    sequence: 45.5% of the tokens at 128, 89.8% at 512 on this corpus."""
    tokenizer = bertzoo.BertTokenizer(documents_corpus / "vocab.txt", lowercase=True)
    documents = tokenize_documents(
        read_corpus([str(documents_corpus / "docs.txt")], layout="documents"), tokenizer
    )
    total = sum(len(s) for doc in documents for s in doc)
    examples = pack_full_sentences(documents, tokenizer, seq_len, seed=3)
    special = [tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id]
    used = int(np.isin(examples.token_ids, special, invert=True).sum())
    assert used == total  # 100% of the text, each token once
    # A document longer than a sequence fills whole sequences; shorter ones
    # are packed whole, as sentences are.
    print(
        f"seq_len {seq_len}: {used} of {total} tokens used, sequences "
        f"{np.mean(examples.padding_mask):.0%} full"
    )
    assert np.mean(examples.padding_mask) > 0.6
