"""rlx.models.LLM on the tiny committed GGUF models of rlx-models (tools/tiny_llm.py): greedy
generation gives llama.cpp's reference tokens (the fixtures' JSON), the streamed pieces join to
detokenize(tokens), seeded sampling repeats, and bad input raises instead of crashing."""

import json
import os

import pytest

from rlx.models import LLM

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "rlx-models", "tests", "fixtures", "llm")
MODELS = ["qwen3-f16", "llama-f16", "qwen3-q8_0", "llama-q8_0", "qwen3k-q4_k_m"]
_cache = {}


def model(name):
    # llama.cpp's references ran with an f32 KV cache.
    if name not in _cache:
        _cache[name] = LLM(os.path.join(FIX, name + ".gguf"), kv_dtype="f32")
    return _cache[name]


def reference(name):
    return json.load(open(os.path.join(FIX, name + ".json")))


@pytest.mark.parametrize("name", MODELS)
def test_greedy_matches_llama_cpp(name):
    r, m = reference(name), model(name)
    g = m.generate(r["prompt_ids"], max_tokens=len(r["greedy"]), ignore_eos=True)
    pieces = list(g)
    assert g.tokens == r["greedy"]
    assert g.prompt_tokens == r["prompt_ids"]
    assert g.finish_reason == "length"
    assert "".join(pieces) == m.detokenize(r["greedy"])
    assert all(isinstance(p, str) and p for p in pieces)


def test_cache_size_does_not_change_tokens():
    r = reference("qwen3-f16")
    n = len(r["greedy"])
    fixed = LLM(os.path.join(FIX, "qwen3-f16.gguf"), ctx=len(r["prompt_ids"]) + n)
    g = fixed.generate(r["prompt_ids"], max_tokens=n, ignore_eos=True)
    list(g)
    assert g.tokens == r["greedy"]
    with pytest.raises(ValueError, match="context of 41"):
        fixed.generate(r["prompt_ids"], max_tokens=n + 1)
    # 9 + 200 tokens outgrow the first cache (128 slots): the model reloads with 256.
    grown = LLM(os.path.join(FIX, "qwen3-f16.gguf"))
    g = grown.generate(r["prompt_ids"], max_tokens=200, ignore_eos=True)
    list(g)
    assert len(g.tokens) == 200 and g.tokens[:n] == r["greedy"]
    with pytest.raises(ValueError, match="ctx"):
        LLM(os.path.join(FIX, "qwen3-f16.gguf"), ctx=0)
    with pytest.raises(ValueError, match="kv_dtype"):
        LLM(os.path.join(FIX, "qwen3-f16.gguf"), kv_dtype="q8")
    with pytest.raises(ValueError, match="ctx"):
        LLM(os.path.join(FIX, "qwen3-f16.gguf"), ctx=257)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_tokenizer_matches_llama_cpp(arch):
    m = model(arch + "-f16")
    for case in json.load(open(os.path.join(FIX, "tokenizer.json")))[arch]:
        assert m.tokenize(case["text"]) == case["ids"], case["text"]
        assert m.detokenize(case["ids"]) == case["detok"], case["text"]


def test_streaming_is_lazy_and_text_prompts_work():
    m = model("qwen3-f16")
    g = m.generate("hello world", max_tokens=5, ignore_eos=True)
    assert g.tokens == [] and g.finish_reason is None
    first = next(g)
    assert len(g.tokens) >= 1 and first
    rest = list(g)
    assert len(g.tokens) == 5 and g.finish_reason == "length"
    assert first + "".join(rest) == m.detokenize(g.tokens)
    assert g.prompt_tokens == m.tokenize("hello world")
    assert list(m.generate("hello", max_tokens=0)) == []


def test_seeded_sampling_repeats():
    m = model("llama-f16")
    kw = dict(max_tokens=24, temperature=1.5, top_k=50, top_p=0.95, repeat_penalty=1.1, ignore_eos=True)
    runs = [list(m.generate("once upon", seed=s, **kw)) for s in (7, 7, 8)]
    toks = [m.generate("once upon", seed=s, **kw) for s in (7, 8)]
    for g in toks:
        list(g)
    assert runs[0] == runs[1]
    assert toks[0].tokens != toks[1].tokens  # different seeds: a different sample
    assert "".join(runs[0]) == m.detokenize(toks[0].tokens)


def test_stop_tokens_and_strings():
    r, m = reference("llama-f16"), model("llama-f16")
    greedy = r["greedy"]
    g = m.generate(r["prompt_ids"], max_tokens=32, stop=[greedy[3]], ignore_eos=True)
    list(g)
    assert g.tokens == greedy[:3] and g.finish_reason == "stop"
    full = m.detokenize(greedy)
    cut = m.detokenize(greedy[:6])
    word = full[len(cut) - 2 : len(cut) + 1]
    assert word and full.find(word) == len(cut) - 2
    g = m.generate(r["prompt_ids"], max_tokens=32, stop=word, ignore_eos=True)
    assert "".join(g) == full[: len(cut) - 2]
    assert g.finish_reason == "stop"


def test_a_later_generation_invalidates_an_earlier_one():
    m = model("qwen3-f16")
    a = m.generate("hello", max_tokens=8, ignore_eos=True)
    next(a)
    b = m.generate("world", max_tokens=8, ignore_eos=True)
    next(b)
    n = len(a.tokens)
    with pytest.raises(RuntimeError, match="invalidated"):
        list(a)
    assert len(a.tokens) == n
    list(b)
    assert len(b.tokens) == 8
    c = m.generate("world", max_tokens=8, ignore_eos=True)
    list(c)
    assert c.tokens == b.tokens  # a fresh prefill gives the same greedy tokens


def test_errors():
    with pytest.raises(RuntimeError, match="nonexistent"):
        LLM("/nonexistent/model.gguf")
    with pytest.raises(ValueError, match="device"):
        LLM(os.path.join(FIX, "qwen3-f16.gguf"), device="nope")
    with pytest.raises(RuntimeError, match="tpu"):
        LLM(os.path.join(FIX, "qwen3-f16.gguf"), device="tpu")
    with pytest.raises(ValueError, match="threads"):
        LLM(os.path.join(FIX, "qwen3-f16.gguf"), threads=0)
    m = model("qwen3-f16")
    for kw, msg in [
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(repeat_penalty=0.0), "repetition_penalty"),
        (dict(max_tokens=-1), "max_tokens"),
        (dict(seed=-1), "seed"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(max_tokens=10**9), "context"),
        (dict(stop=[""]), "stop"),
        (dict(stop=[1.5]), "stop"),
        (dict(stop=[10**6]), "vocabulary"),
    ]:
        with pytest.raises(ValueError, match=msg):
            m.generate("hi", **{"max_tokens": 4, **kw})
    with pytest.raises(ValueError, match="empty"):
        m.generate([])
    with pytest.raises(ValueError, match="vocabulary"):
        m.generate([1, m.vocab_size])
    with pytest.raises(ValueError, match="vocabulary"):
        m.generate([-1])
    with pytest.raises(ValueError, match="prompt"):
        m.generate(3.5)
    with pytest.raises(ValueError, match="vocabulary"):
        m.detokenize([m.vocab_size])


HF = os.path.join(FIX, "..", "hf")


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_hugging_face_folder_matches_its_gguf_conversion(arch):
    """A Hugging Face checkpoint folder (tools/hf_tiny_llm.py) loads like a GGUF file: the same
    greedy tokens as its GGUF conversion, the tokenizer of tokenizer.json, its stop tokens."""
    r = json.load(open(os.path.join(HF, arch + ".json")))
    hf = LLM(os.path.join(HF, arch + "-bf16"), kv_dtype="f32")
    gg = LLM(os.path.join(HF, arch + "-bf16.gguf"), kv_dtype="f32")
    assert hf.tokenize(r["prompt"]) == r["prompt_ids"] == gg.tokenize(r["prompt"])
    a = hf.generate(r["prompt_ids"], max_tokens=16, ignore_eos=True)
    b = gg.generate(r["prompt_ids"], max_tokens=16, ignore_eos=True)
    list(a), list(b)
    assert a.tokens == b.tokens and len(a.tokens) == 16
    assert hf.eos_token == r["stop_ids"][0]
    q = LLM(os.path.join(HF, arch + "-bf16"), quantize="q8_0")
    assert len(list(q.generate(r["prompt_ids"], max_tokens=4, ignore_eos=True))) >= 1
    with pytest.raises(ValueError, match="quantize"):
        LLM(os.path.join(HF, arch + "-bf16"), quantize="q2")


def test_generate_batch_equals_one_prompt_at_a_time():
    # Continuous batching over the paged KV cache: 5 prompts of different lengths, 2 sequences
    # per step, so prompts join as others finish; greedy results equal generate's.
    m = LLM(os.path.join(FIX, "qwen3-f16.gguf"))
    prompts = ["hello world", [5, 77, 120, 3, 250, 9], "a", "the quick brown fox jumps", [42]]
    got = m.generate_batch(prompts, max_tokens=10, ignore_eos=True, max_batch=2)
    assert len(got) == len(prompts)
    for p, r in zip(prompts, got):
        g = m.generate(p, max_tokens=10, ignore_eos=True)
        text = "".join(g)
        assert r["tokens"] == g.tokens
        assert r["text"] == text
        assert r["finish_reason"] == "length"
    # Seeded sampling repeats; the scheduler (and its graphs) is reused between calls.
    a = m.generate_batch(prompts[:3], max_tokens=6, temperature=0.9, seed=3)
    b = m.generate_batch(prompts[:3], max_tokens=6, temperature=0.9, seed=3)
    assert a == b
    with pytest.raises(ValueError, match="max_batch"):
        m.generate_batch(prompts, max_batch=0)
    with pytest.raises(ValueError, match="empty"):
        m.generate_batch([[]])
    with pytest.raises(ValueError, match="context"):
        m.generate_batch(["a"], max_tokens=10**6)
