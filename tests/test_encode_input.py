"""Both encoders check their input with one helper (``types.check_texts``): the same errors,
raised before any model is loaded."""
from __future__ import annotations

import pytest

from causalmem.semantic import SentenceTransformerEmbedder
from causalmem.types import check_texts


def test_check_texts():
    assert check_texts(["a", "b"]) == ["a", "b"]
    assert check_texts(("a",)) == ["a"] and check_texts(t for t in ["x", "y"]) == ["x", "y"]
    assert check_texts([]) == []
    with pytest.raises(TypeError, match="texts must be a sequence of strings, not a single str"):
        check_texts("abc")
    with pytest.raises(TypeError, match="not a single bytes"):
        check_texts(b"abc")
    with pytest.raises(TypeError, match="queries must be a sequence of strings, got int"):
        check_texts(5, "queries")
    with pytest.raises(TypeError, match=r"texts\[2\] must be a string, got NoneType"):
        check_texts(["a", "b", None])


def _encoders():
    yield SentenceTransformerEmbedder()
    try:
        from causalmem.onnx_embedder import OnnxEmbedder, onnx_available
    except ImportError:  # pragma: no cover - the module imports without onnxruntime
        return
    if onnx_available():
        yield OnnxEmbedder()


@pytest.mark.parametrize("bad, match", [("one string", "not a single str"), (["ok", 3], r"texts\[1\] must be a string"),
                                        (None, "got NoneType")])
def test_every_encoder_checks_alike_without_loading(bad, match):
    for enc in _encoders():
        with pytest.raises(TypeError, match=match):
            enc.encode(bad)
        assert getattr(enc, "_model", None) is None and getattr(enc, "_sess", None) is None, enc
