"""bringup-run --server refuses what it must (csrc/cli/bu_http.c, bu_request.c, bu_json.c;
docs/runtime.md "The server"): malformed JSON, fields of the wrong type or out of their domain,
unknown fields, a body over --max-body (413, unread), a head over 16 KiB (431), requests a strict
HTTP/1.1 reader refuses. Each answer is one OpenAI error object; the server keeps serving. Options
given without --server, or with a prompt, are one-line usage errors (exit 2)."""
from __future__ import annotations

import json

import openai
import pytest

from tests.helpers import server as srv
from tests.helpers.native_cli import cli, one_line_error

CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def server(native_build, tmp_path_factory):
    s = srv.start(native_build, tmp_path_factory.mktemp("server") / "server.log", "--max-body", "4096", "--timeout", "5")
    yield s
    assert s.stop() == 0, s.log_text()


def post(server, path: str, body: bytes) -> tuple[int, dict]:
    code, out = srv.status_and_body(srv.curl("--data-binary", "@-", server.base + path, input=body))
    return code, json.loads(out) if out else {}


BAD_JSON = [
    b'{"prompt": "x",}', b'{"prompt": "x"', b"{'prompt': 'x'}", b'{"prompt": "x"} {}', b'{"prompt": NaN}',
    b'{"prompt": "x", "max_tokens": 01}', b'{"prompt": "\\ud800"}', b'{"prompt": "a\x01b"}', b'{"prompt": "\xff"}',
    b'{"prompt": "x", "prompt": "y"}', b"[" * 40 + b"]" * 40, b'{"prompt": "x\\u0000"}', b"", b'{"a": 1e999}',
    b'{"prompt": "x", "temperature": .5}', b'{"prompt": "x", "temperature": +1}', b"/* c */ {}",
]


@pytest.mark.parametrize("body", BAD_JSON, ids=range(len(BAD_JSON)))
def test_malformed_json_is_a_400(server, body):
    code, out = post(server, "/v1/completions", body)
    assert code == 400 and out["error"]["type"] == "invalid_request_error", out
    assert "\n" not in out["error"]["message"]


WRONG = [
    ({"temperature": "0.5"}, "temperature"), ({"temperature": -1}, "temperature"), ({"max_tokens": 1.5}, "max_tokens"),
    ({"max_tokens": 1e2}, "max_tokens"), ({"max_tokens": -3}, "max_tokens"), ({"max_tokens": True}, "max_tokens"),
    ({"top_k": 2.0}, "top_k"), ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"seed": -1}, "seed"),
    ({"stream": "yes"}, "stream"), ({"stream": 1}, "stream"), ({"stop": 5}, "stop"), ({"stop": [""]}, "stop"),
    ({"stop": ["a"] * 17}, "stop"), ({"n": 2}, "n"), ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"logprobs": True}, "logprobs"), ({"model": 7}, "model"), ({"messages": "Hi"}, "messages"),
    ({"messages": []}, "messages"), ({"messages": [{"role": "assistant", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}, "messages"),
    ({"messages": [{"role": "tool", "content": "a"}]}, "messages"),
    ({"stream_options": {"include_usage": 1}}, "stream_options"), ({"wat": 1}, None),
    ({"max_tokens": 100000}, "max_tokens"),
]


@pytest.mark.parametrize("fields,param", WRONG, ids=[json.dumps(w[0])[:40] for w in WRONG])
def test_wrong_typed_fields_are_refused_by_name(server, fields, param):
    code, out = post(server, "/v1/chat/completions", json.dumps({**CHAT, **fields}).encode())
    assert code == 400 and out["error"]["param"] == param, out


def test_openai_client_sees_a_bad_request(server):
    c = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="top_p"):
        c.chat.completions.create(model="smollm2", messages=CHAT["messages"], top_p=3)
    with pytest.raises(openai.NotFoundError, match="serves smollm2"):
        c.chat.completions.create(model="gpt-4o", messages=CHAT["messages"])


def test_a_body_over_max_body_is_413_unread(server):
    big = json.dumps({**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]})
    code, out = post(server, "/v1/chat/completions", big.encode())   # answered before the body is read
    assert code == 413 and "--max-body" in out["error"]["message"], out
    head = b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"
    assert srv.raw(server.port, head + b"x" * 10000).startswith(b"HTTP/1.1 413 ")


@pytest.mark.parametrize("request_bytes,status", [
    (b"GET /health HTTP/1.1\r\n" + b"X-A: " + b"a" * 17000 + b"\r\n\r\n", 431),
    (b"GET /health HTTP/1.1\r\n" + b"X-A: a\r\n" * 70 + b"\r\n", 431),
    (b"GET /health HTTP/2.0\r\n\r\n", 505), (b"GET health HTTP/1.1\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\nHost: x\n\n", 400), (b"GET /health HTTP/1.1\r\n folded\r\n\r\n", 400),
    (b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    (b"POST /v1/completions HTTP/1.1\r\n\r\n", 411),
    (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
    (b"GET /v1/nothing HTTP/1.1\r\n\r\n", 404), (b"POST /health HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
    (b"GET /v1/completions HTTP/1.1\r\n\r\n", 405),
])
def test_strict_http(server, request_bytes, status):
    out = srv.raw(server.port, request_bytes)
    assert out.startswith(b"HTTP/1.1 %d " % status), out[:200]
    assert json.loads(out.split(b"\r\n\r\n", 1)[1])["error"]["code"] == status


def test_still_serving_after_the_refusals(server):
    code, out = post(server, "/v1/chat/completions", json.dumps(CHAT).encode())
    assert code == 200 and out["choices"][0]["message"]["role"] == "assistant"


@pytest.mark.parametrize("args,needle", [
    (("--port", "8080"), "apply to --server"), (("--host", "0.0.0.0"), "apply to --server"),
    (("--server", "-p", "hi"), "takes its prompts from HTTP requests"), (("--server", "--port", "70000"), "--port 70000"),
    (("--server", "--queue", "-1"), "--queue -1"), (("--server", "--max-body", "10"), "--max-body 10"),
    (("--server", "--timeout", "0"), "--timeout 0"),
])
def test_option_errors(cli_only, args, needle):
    r = cli(cli_only, "lib.so", "w.bump", *args)
    one_line_error(r, 2, needle)
