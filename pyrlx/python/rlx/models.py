"""`rlx.models`: pretrained models from Python.

`Embedder(dir).embed(texts)` gives BERT-family sentence embeddings (all-MiniLM-L6-v2, BGE, ...)
as a float32 array `[len(texts), dim]`.

`LLM(path).generate(prompt)` streams text from a Qwen3 / Llama GGUF model: it returns a
`Generation`, an iterator of text pieces that runs the model lazily, one token per step (more
only when a character spans several tokens); `tokenize` / `detokenize` use the model's own
tokenizer.
"""

from ._rlx import LLM, Embedder, Generation

__all__ = ["Embedder", "LLM", "Generation"]
