"""Synthetic tokenized corpora for the data tests."""

import numpy as np


def numbered_documents(num_docs, sentences_per_doc, lengths=(3, 8), seed=0, offset=5):
    """Tokenized documents whose ids increase through the corpus, so every
    id names its document and position. Returns (documents, doc_of_id)."""
    rng = np.random.default_rng(seed)
    docs, doc_of, next_id = [], {}, offset
    for d in range(num_docs):
        doc = []
        for _ in range(sentences_per_doc):
            n = int(rng.integers(lengths[0], lengths[1] + 1))
            ids = np.arange(next_id, next_id + n, dtype=np.int32)
            for i in ids:
                doc_of[int(i)] = d
            next_id += n
            doc.append(ids)
        docs.append(doc)
    return docs, doc_of
