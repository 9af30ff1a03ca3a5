"""Linear heads trained on frozen features in numpy (deterministic,
full-batch gradient descent): how the int8 quality checks give a
checkpoint's task model a working head in seconds instead of fine-tuning
its encoder for minutes (tests/models/test_quantize.py,
tests/models/test_int8_litert.py, benchmarks/int8_tasks.py)."""

import numpy as np


def softmax_probe(features, labels, classes, steps=300, rate=0.5, l2=0.1, standardize=True):
    """A softmax regression on `features` (N, H): `(kernel, bias)` of one
    Dense layer on the raw features. `standardize`: train on standardized
    features and fold the scaling into the kernel (fast to train, but
    dimensions of tiny variance get large weights, which one int8 scale
    per output unit then rounds the others away for); else train on the
    raw features, as fine-tuning trains a head."""
    mean, scale = features.mean(0), features.std(0) + 1e-6
    if not standardize:
        mean, scale = np.zeros_like(mean), np.ones_like(scale)
    z = (features - mean) / scale
    w, b = np.zeros((z.shape[1], classes)), np.zeros(classes)
    onehot = np.eye(classes)[labels]
    for _ in range(steps):
        logits = z @ w + b
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        w -= rate * (z.T @ (p - onehot) / len(z) + l2 * w)
        b -= rate * (p - onehot).mean(0)
    # Folded back onto the raw features.
    return (w / scale[:, None]).astype("float32"), (b - (mean / scale) @ w).astype("float32")


def span_probe(features, mask, targets, steps=300, rate=0.5, l2=1e-3):
    """A linear scorer of token features (N, S, H) for one end of a span,
    trained on the softmax over each window's real positions (`mask`)
    against the target positions (N,): `(kernel (H,), bias)` on the raw
    features."""
    real = mask.astype(bool)
    mean, scale = features[real].mean(0), features[real].std(0) + 1e-6
    z = ((features - mean) / scale).astype("float32")
    flat = z.reshape(-1, z.shape[-1])
    w = np.zeros(z.shape[-1], "float32")
    onehot = np.eye(z.shape[1], dtype="float32")[targets]
    for _ in range(steps):
        logits = np.where(real, z @ w, -1e9)
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        w -= rate * ((p - onehot).reshape(-1) @ flat / len(z) + l2 * w)
    return w / scale, -(mean / scale) @ w
