"""bringup-run --server (issue 33 section 5; csrc/cli/bu_server.c, bu_endpoints.c, docs/runtime.md
"The server") with real clients: the `openai` package from PyPI and curl. Greedy answers equal the
one-shot CLI's (`bringup-run -p`, `--chat`) for the same prompt; streaming gives the same text in
server-sent events; a client that leaves mid-stream stops its generation and the server serves the
next; concurrent clients are served one at a time, in full; SIGTERM ends a stream and exits 0.

The program is the smollm2 build of tests/helpers/native_cli.py (slow: it may build it)."""
from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path

import openai
import pytest

from bringup.formats import chat
from tests.helpers import server as srv
from tests.helpers.native_cli import FAST, cli, err_of
from tests.helpers.tokenizer import gguf_tokenizer_json

PROMPT = "The capital of France is"
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def server(native_build, tmp_path_factory):
    s = srv.start(native_build, tmp_path_factory.mktemp("server") / "server.log")
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=120)


def one_shot(build: Path, *args) -> str:
    """The CLI's greedy answer (stdout without the line end it adds)."""
    r = cli(build, "-m", build, *FAST, "--no-display-prompt", *args)
    assert r.returncode == 0, err_of(r)
    out = r.stdout.decode()
    assert out.endswith("\n")
    return out[:-1]


def test_health_and_models_with_curl(server):
    code, body = srv.status_and_body(srv.curl(server.base + "/health"))
    assert (code, json.loads(body)) == (200, {"status": "ok"})
    code, body = srv.status_and_body(srv.curl(server.base + "/v1/models"))
    models = json.loads(body)
    assert code == 200 and [m["id"] for m in models["data"]] == ["smollm2"], models   # results/smollm2/build


def test_models_with_openai(client):
    assert [m.id for m in client.models.list()] == ["smollm2"]


def test_a_relative_model_folder_is_named_by_its_resolved_path(native_build, tmp_path):
    """`./bringup-run -m . --server` (docs/runtime.md, as from a bundle) serves the folder's own name,
    the one an OpenAI client sends, not "."."""
    s = srv.start(native_build, tmp_path / "log", cwd=native_build,
                  argv=["./bringup-run", "-m", ".", *FAST, "--server", "--port", "0"])
    try:
        code, body = srv.status_and_body(srv.curl(s.base + "/v1/models"))
        assert code == 200 and [m["id"] for m in json.loads(body)["data"]] == ["smollm2"], body
    finally:
        assert s.stop() == 0


def test_completion_equals_the_cli(native_build, client):
    want = one_shot(native_build, "-p", PROMPT, "-n", "16")
    r = client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=16, temperature=0)
    assert r.choices[0].text == want
    assert r.usage.completion_tokens <= 16 and r.usage.prompt_tokens > 0
    assert r.choices[0].finish_reason == ("length" if r.usage.completion_tokens == 16 else "stop")


def test_chat_equals_the_cli_and_streams_the_same(native_build, client):
    want = one_shot(native_build, "-p", QUESTION, "--chat", "-n", "24")
    msgs = [{"role": "user", "content": QUESTION}]
    r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=24, temperature=0)
    assert r.choices[0].message.content == want and r.choices[0].message.role == "assistant"
    chunks = list(client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=24, stream=True,
                                                 stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(deltas) == want and len([d for d in deltas if d]) > 3   # token by token, not one block
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == r.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens


def test_completion_stream_with_curl(native_build, server):
    want = one_shot(native_build, "-p", PROMPT, "-n", "12")
    body = json.dumps({"prompt": PROMPT, "max_tokens": 12, "stream": True})
    r = srv.curl("-N", "-H", "Content-Type: application/json", "-d", body, server.base + "/v1/completions")
    code, out = srv.status_and_body(r)
    events = [e for e in out.decode().split("\n\n") if e]
    assert code == 200 and events[-1] == "data: [DONE]", out
    assert "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1]) == want


def test_stop_strings_end_the_text_before_them(native_build, client):
    full = one_shot(native_build, "-p", PROMPT, "-n", "16")
    stop = full.strip()[3:6]   # a piece of the greedy answer
    cut = full[:full.index(stop)]
    r = client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=16, stop=[stop])
    assert (r.choices[0].text, r.choices[0].finish_reason) == (cut, "stop")
    s = client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=16, stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in s) == cut   # held back, never sent and taken back


def test_multi_turn_history_is_the_gguf_templates(client, smollm2_gguf):
    """A history (system, user, assistant, user) renders as the GGUF's own jinja template does: the
    chat answer and its prompt's token count equal a completion of the template's text."""
    msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": QUESTION}]
    text = chat.render_template(gguf_tokenizer_json(smollm2_gguf)["chat_template"], msgs, add_generation_prompt=True)
    r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=12)
    want = client.completions.create(model="smollm2", prompt=text, max_tokens=12)
    assert r.choices[0].message.content == want.choices[0].text
    assert r.usage.prompt_tokens == want.usage.prompt_tokens > 20


def test_a_client_leaving_mid_stream_stops_its_generation(server, client):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 200, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        srv.recv_until(s, b"data: ", 3)
    t0 = time.monotonic()
    r = client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=4)
    assert r.choices[0].text and time.monotonic() - t0 < 60
    log = server.log_text()
    assert "(the client left: stopped)" in log, log
    left = [ln for ln in log.splitlines() if "the client left" in ln][-1]
    assert int(left.split(" prompt + ")[1].split()[0]) < 200, left   # stopped early, not after 200 tokens


def test_concurrent_clients_are_served_in_turn(native_build, client):
    want = one_shot(native_build, "-p", PROMPT, "-n", "8")
    out, errors = [None] * 4, []

    def ask(i):
        try:
            out[i] = client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=8).choices[0].text
        except Exception as e:   # noqa: BLE001 - reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and out == [want] * 4, (errors, out)


def test_a_full_queue_answers_503(native_build, tmp_path):
    s = srv.start(native_build, tmp_path / "log", "--queue", "0")
    try:
        body = json.dumps({"prompt": PROMPT, "max_tokens": 60, "stream": True}).encode()
        with socket.create_connection(("127.0.0.1", s.port), timeout=60) as busy:
            busy.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            assert b"200 OK" in srv.recv_until(busy, b"\r\n\r\n")   # it holds the model (the head follows its turn)
            code, out = srv.status_and_body(srv.curl("-d", '{"prompt": "x", "max_tokens": 1}', s.base + "/v1/completions"))
            assert code == 503 and "--queue 0" in json.loads(out)["error"]["message"], out
            assert srv.status_and_body(srv.curl(s.base + "/health"))[0] == 200   # not queued
    finally:
        assert s.stop() == 0


def test_sigterm_ends_the_stream_and_exits_0(native_build, tmp_path):
    s = srv.start(native_build, tmp_path / "log")
    body = json.dumps({"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 200, "stream": True,
                       "stop": ["\u2603 never"]}).encode()
    with socket.create_connection(("127.0.0.1", s.port), timeout=60) as c:
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        got = srv.recv_until(c, b"data: ")
        assert b"data: " in got
        t0 = time.monotonic()
        assert s.stop() == 0, s.log_text()
        while chunk := c.recv(65536):
            got += chunk
    assert time.monotonic() - t0 < 10
    last = [e for e in got.decode().split("\n\n") if e.strip()][-1]
    assert "shutting down" in json.loads(last[6:])["error"]["message"] and b"[DONE]" not in got
    assert "stopped" in s.log_text()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=5).close()


def test_bringup_serve_launches_the_native_server(native_build, tmp_path):
    """`bringup serve --model NAME` becomes bringup-run --server (exec: the pid, SIGTERM and exit code
    are the program's)."""
    tree = native_build.parent.parent
    argv = [sys.executable, "-m", "bringup", "serve", "--model", "smollm2", "--results-dir", str(tree), *FAST,
            "--port", "0"]
    s = srv.start(native_build, tmp_path / "log", argv=argv)
    try:
        assert Path(f"/proc/{s.proc.pid}/exe").resolve().name == "bringup-run"
        out = openai.OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0).completions.create(
            model="smollm2", prompt=PROMPT, max_tokens=4)
        assert out.choices[0].text
    finally:
        assert s.stop() == 0
