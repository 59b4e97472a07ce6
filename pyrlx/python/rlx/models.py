"""`rlx.models`: pretrained models from Python.

`Embedder(dir).embed(texts)` gives BERT-family sentence embeddings (all-MiniLM-L6-v2, BGE, ...)
as a float32 array `[len(texts), dim]`. Text generation (`LLM`) is not bound yet.
"""

from ._rlx import Embedder

__all__ = ["Embedder"]
