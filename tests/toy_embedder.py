"""A deterministic bag-of-words embedder shared by the embedding tests: a complete causalmem
embedder with its own vector space (words hashed into 64 buckets, L2-normalised), counting its
calls and texts; ``delay`` seconds per batch, and with ``gated=True`` batches of more than one
text wait until the test sets ``gate`` (``entered`` tells that one is waiting)."""
from __future__ import annotations

import hashlib
import threading
import time

import numpy as np


class BagOfWordsEmbedder:
    model_name = "bag-of-words-64"
    dim = 64

    def __init__(self, delay: float = 0.0, gated: bool = False) -> None:
        self.delay = delay
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.entered = threading.Event()  # a batch (> 1 text) is being encoded
        self.calls = 0
        self.texts = 0

    def encode(self, texts):
        texts = list(texts)
        if len(texts) > 1:
            self.entered.set()
            assert self.gate.wait(60), "test never opened the gate"
        if self.delay:
            time.sleep(self.delay)
        self.calls += 1
        self.texts += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "little")
                out[i, h % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)
