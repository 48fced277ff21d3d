"""A stand-in for an LLM API behind the gateway, for the example and its
tests: POST /v1/chat/completions answers an OpenAI-style completion whose
`usage.total_tokens` is the request's `x_used` (default 42), or fails with
500 and no usage when `x_fail` is set.

    uvicorn app:app   (Turnstile on 127.0.0.1:6379)
"""

import json
import os

from gateway import TokenBudgetMiddleware, create_client


async def fake_llm(scope, receive, send):
    assert scope["type"] == "http"
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            break
    req = json.loads(body or b"{}")
    if req.get("x_fail"):
        status, out = 500, {"error": {"message": "upstream failed"}}
    else:
        used = int(req.get("x_used", 42))
        status, out = 200, {"object": "chat.completion",
                            "choices": [{"message": {"role": "assistant", "content": "..."}}],
                            "usage": {"prompt_tokens": used // 2, "completion_tokens": used - used // 2,
                                      "total_tokens": used}}
    data = json.dumps(out).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def create_app(redis, budget=100_000, **kw):
    return TokenBudgetMiddleware(fake_llm, redis=redis, budget=budget, **kw)


app = create_app(create_client(os.environ.get("TURNSTILE_URL", "redis://127.0.0.1:6379")))
