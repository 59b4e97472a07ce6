"""The official `openai` Python client against `rlx serve` (completions and chat, streaming and
not). Run by tools/serve_openai_check.sh in CI:  python3 tools/openai_client_check.py BASE_URL
"""

import sys

import openai


def main(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=60, max_retries=0)
    models = client.models.list()
    model = models.data[0].id

    c = client.completions.create(model=model, prompt="hello world", max_tokens=8, temperature=0)
    assert c.choices[0].finish_reason in ("stop", "length"), c
    assert c.usage.completion_tokens >= 1 and c.usage.prompt_tokens >= 1, c.usage
    greedy = c.choices[0].text

    pieces, finish, usage = [], None, None
    for chunk in client.completions.create(
        model=model, prompt="hello world", max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ):
        for ch in chunk.choices:
            pieces.append(ch.text)
            finish = ch.finish_reason or finish
        usage = chunk.usage or usage
    assert "".join(pieces) == greedy, (pieces, greedy)
    assert finish == c.choices[0].finish_reason and usage.completion_tokens == c.usage.completion_tokens

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=6, temperature=0, seed=3)
    assert r.choices[0].message.role == "assistant" and isinstance(r.choices[0].message.content, str), r
    text, finish = "", None
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, temperature=0, seed=3, stream=True
    ):
        for ch in chunk.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert text == r.choices[0].message.content and finish == r.choices[0].finish_reason, (text, r)

    try:
        client.completions.create(model=model, prompt="hi", max_tokens=-1)
        raise AssertionError("max_tokens -1 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "max_tokens", e.body
    print(f"openai {openai.__version__} client against {base_url}: completions and chat, streaming and not: ok")


if __name__ == "__main__":
    main(sys.argv[1])
