"""bringup-run, the built CLI, on the tiny model of tests/test_build.py: numbers against an
independent float64 numpy forward pass (bringup.parity.oracles.NumpyReference), output formats, and
every exit code. The end-to-end check on the real SmolLM2 weights against llama.cpp is the
``slow`` test at the end."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from bringup.ir import block
from bringup.formats import chat
from bringup.parity import oracles, xray
from tests.helpers.pipeline import CHAT, run_pipeline, tiny_chat_pipeline, tiny_pipeline, write_tiny_gguf


N_VOCAB = 260


def run(*args, p=None, input=None, check_rc=None):
    p = p or tiny_pipeline()
    r = subprocess.run([str(p["cli"]), str(p["lib"]), str(p["bump"]), *map(str, args)], capture_output=True,
                       text=True, errors="replace", input=input, timeout=120)
    if check_rc is not None:
        assert r.returncode == check_rc, (r.returncode, r.stderr)
    return r


@pytest.fixture(scope="module")
def ref():
    return oracles.NumpyReference(tiny_pipeline()["gguf"])


def test_all_logits_match_independent_numpy_forward(tmp_path, ref):
    toks = [104, 101, 108, 108, 111, 32, 119, 111, 114, 108]   # 10 tokens: chunks of 4, 4, 2
    out = tmp_path / "logits.f32"
    r = run("--prompt-tokens", ",".join(map(str, toks)), "--all-logits", out, "--max-tokens", "0", "--json",
            check_rc=0)
    ours = np.fromfile(out, dtype="<f4").reshape(len(toks), N_VOCAB)
    want = ref.logits_all(toks)
    scale = np.abs(want).max()
    assert np.abs(ours - want).max() <= 1e-4 * scale, np.abs(ours - want).max()
    assert json.loads(r.stdout)["prompt_tokens"] == toks


def test_all_logits_rows_equal_the_default_last_row(tmp_path):
    """The tail loop gives the same last row whether one row or every row is computed."""
    toks = "5,6,7,8,9,10,11"
    run("--prompt-tokens", toks, "--all-logits", tmp_path / "a.f32", "--max-tokens", "0", check_rc=0)
    allrows = np.fromfile(tmp_path / "a.f32", dtype="<f4").reshape(7, N_VOCAB)
    for n in (1, 4, 5, 7):   # inside one chunk, exactly one chunk, across chunks
        run("--prompt-tokens", toks.split(",", n)[:n] and ",".join(toks.split(",")[:n]), "--all-logits",
            tmp_path / "b.f32", "--max-tokens", "0", check_rc=0)
        part = np.fromfile(tmp_path / "b.f32", dtype="<f4").reshape(n, N_VOCAB)
        np.testing.assert_array_equal(part, allrows[:n])


def test_threads_give_identical_results(tmp_path):
    toks = "104,101,108,108,111,32,119"
    outs = []
    for n in (1, 2, 3):
        r = run("--prompt-tokens", toks, "--all-logits", tmp_path / f"t{n}.f32", "--max-tokens", "10",
                "--no-stop", "--json", "--threads", n, check_rc=0)
        outs.append((json.loads(r.stdout)["generated_tokens"], (tmp_path / f"t{n}.f32").read_bytes()))
    assert outs[0] == outs[1] == outs[2]


def test_greedy_continuation_matches_reference(ref):
    toks = [116, 104, 101, 32, 99, 97, 116]
    r = run("--prompt-tokens", ",".join(map(str, toks)), "--max-tokens", "12", "--json", "--no-stop", check_rc=0)
    got = json.loads(r.stdout)["generated_tokens"]
    want = ref.greedy(toks, 12)
    assert got == want


def test_json_text_and_timing():
    r = run("--prompt", "hello", "--max-tokens", "5", "--json", "--no-stop", check_rc=0)
    doc = json.loads(r.stdout)
    assert doc["prompt_tokens"] == list(b"hello")   # byte-level tokens, no BOS for this model
    assert len(doc["generated_tokens"]) == 5
    assert doc["payload_verified"] is True and doc["n_ctx"] == 64
    t = doc["timing"]
    for k in ("prompt_eval_ms", "prompt_tokens", "prompt_tok_per_s", "decode_ms", "decode_runs",
              "decode_tok_per_s", "ttft_ms", "peak_rss_kib", "minor_page_faults", "major_page_faults"):
        assert k in t
    assert t["prompt_tokens"] == 5 and t["decode_runs"] == 4 and t["peak_rss_kib"] > 0
    # which ISA level served each class of linear call, and why (docs/kernels.md, dispatch by measurement)
    d = doc["isa_dispatch"]
    assert d["default"] == doc["isa"] and d["how"] and d["classes_overflowed"] is False
    for c in d["classes"]:
        assert c["phase"] in ("decode", "prefill") and c["activations"] in ("f32", "q8") and c["n_in"] > 0, c
        assert c["level"] in (None, "avx2", "avx512") and c["why"], c
    # text is the bytes of the generated tokens (the first 256 ids are the bytes themselves)
    if all(i < 256 for i in doc["generated_tokens"]) and doc["text_lossless"]:
        assert doc["text"].encode("utf-8") == bytes(doc["generated_tokens"])


def test_plain_output_and_timing_report():
    r = run("--prompt", "ab", "--max-tokens", "3", "--timing", "--no-stop", check_rc=0)
    assert r.stdout.endswith("\n")
    for what in ("prompt eval:", "tokens", "decode:", "runs", "tok/s", "time to first token", "peak RSS:",
                 "page faults"):
        assert what in r.stderr, what


def test_sampling_is_seeded():
    a = run("--prompt", "ab", "--max-tokens", "8", "--temperature", "1.5", "--seed", "7", "--json", "--no-stop",
            check_rc=0)
    b = run("--prompt", "ab", "--max-tokens", "8", "--temperature", "1.5", "--seed", "7", "--json", "--no-stop",
            check_rc=0)
    assert json.loads(a.stdout)["generated_tokens"] == json.loads(b.stdout)["generated_tokens"]
    outs = {tuple(json.loads(run("--prompt", "ab", "--max-tokens", "8", "--temperature", "1.5", "--seed", s,
                                 "--json", "--no-stop", check_rc=0).stdout)["generated_tokens"]) for s in range(4)}
    assert len(outs) > 1


def test_stops_at_end_of_generation(ref):
    """Generation ends at the first EOS (id 259) unless --no-stop."""
    toks = [116, 104, 101]
    seq = ref.greedy(toks, 30)
    r = run("--prompt-tokens", "116,104,101", "--max-tokens", "30", "--json", check_rc=0)
    got = json.loads(r.stdout)["generated_tokens"]
    want = seq[: seq.index(259)] if 259 in seq else seq
    assert got == want


# ---- exit codes ----

def test_usage_errors():
    assert run("--bogus").returncode == 2
    assert run("--max-tokens", "x", "--prompt", "a").returncode == 2
    assert run("--prompt", "a", "--prompt-tokens", "1").returncode == 2
    assert run("--top-p", "0", "--prompt", "a").returncode == 2
    r = run("--prompt-tokens", "1,2,260")
    assert r.returncode == 2 and "not a token id in [0, 260)" in r.stderr
    p = tiny_pipeline()
    r = subprocess.run([str(p["cli"])], capture_output=True, text=True, errors="replace")
    assert r.returncode == 2 and "no model: give -m DIR" in r.stderr and len(r.stderr.splitlines()) == 1


def test_prompt_longer_than_context_is_an_error():
    r = run("--prompt-tokens", ",".join(["5"] * 9), "--ctx", "8")
    assert r.returncode == 2 and "the context holds 8" in r.stderr
    r = run("--prompt-tokens", "5,6", "--ctx", "8", "--max-tokens", "20")
    assert r.returncode == 2 and "does not fit" in r.stderr
    r = run("--prompt-tokens", "5", "--ctx", "65")
    assert r.returncode == 2 and "planned for" in r.stderr


def test_wrong_missing_and_corrupt_weights(tmp_path):
    p = tiny_pipeline()
    # another model's weights file: convert (+ ir, plan, codegen) only, its library is not needed
    other = run_pipeline(tmp_path / "other", write_tiny_gguf(tmp_path / "other.gguf", seed=1), build_it=False)
    r = subprocess.run([str(p["cli"]), str(p["lib"]), str(other["bump"]), "--prompt", "a"], capture_output=True, text=True, errors="replace")
    assert r.returncode == 3 and "this model library was generated for" in r.stderr
    r = subprocess.run([str(p["cli"]), str(p["lib"]), str(tmp_path / "nope.bump"), "--prompt", "a"],
                       capture_output=True, text=True, errors="replace")
    assert r.returncode == 5 and "cannot open weights" in r.stderr
    raw = bytearray(p["bump"].read_bytes())
    raw[int.from_bytes(raw[48:56], "little") + 100] ^= 0x01   # a weight byte (the first tensor's)
    (tmp_path / "bad.bump").write_bytes(bytes(raw))
    r = subprocess.run([str(p["cli"]), str(p["lib"]), str(tmp_path / "bad.bump"), "--prompt-tokens", "1"],
                       capture_output=True, text=True, errors="replace")
    assert r.returncode == 3 and "payload SHA-256" in r.stderr
    r = subprocess.run([str(p["cli"]), str(p["lib"]), str(tmp_path / "bad.bump"), "--prompt-tokens", "1",
                        "--no-verify", "--max-tokens", "1"], capture_output=True, text=True, errors="replace")
    assert r.returncode == 0 and "NOT verified" in r.stderr
    r = subprocess.run([str(p["cli"]), str(tmp_path / "libnope.so"), str(p["bump"]), "--prompt", "a"],
                       capture_output=True, text=True, errors="replace")
    assert r.returncode == 5 and "cannot load model library" in r.stderr


def test_chat_needs_a_chat_format():
    r = run("--chat", "--prompt", "hi")
    assert r.returncode == 4 and "no chat format" in r.stderr
    r = run(input="hi\n")   # interactive needs it too
    assert r.returncode == 4


@pytest.mark.parametrize("old, new, why", [(b"\0turn\0", b"\0tur\n\0", "unknown system mode"),
                                          (b"BUCHAT2\0tiny\0" + b"1\0", b"BUCHAT2\0tiny\0" + b"2\0", "not 0 or 1")])
def test_a_bad_chat_format_is_refused_in_one_line(tmp_path, old, new, why):
    """A chat.format blob the parser refuses (here written over the weights' own, same length, and
    read with --no-verify so the payload hash does not catch it first): exit 3 and one line that
    names the fault without quoting the blob's bytes (csrc/fuzz/fuzz_chat.c fuzzes the parser)."""
    p = dict(tiny_pipeline(chat=True))
    data = p["bump"].read_bytes()
    assert data.count(old) == 1, old
    p["bump"] = tmp_path / "w.bump"
    p["bump"].write_bytes(data.replace(old, new))
    r = run("--no-verify", "--chat", "--prompt", "hi", p=p)
    lines = [x for x in r.stderr.splitlines() if "NOT verified" not in x]
    assert r.returncode == 3 and len(lines) == 1 and why in lines[0] and "chat.format" in lines[0], r.stderr
    assert "tur\\n" not in lines[0]   # the blob's bytes are not quoted (not even escaped)


def _tokens_of(text: str) -> list[int]:
    """The tiny vocabulary's ids for text: byte tokens, <|im_end|> parsed as the special id 259."""
    out = []
    for i, part in enumerate(text.split("<|im_end|>")):
        out += ([259] if i else []) + list(part.encode())
    return out


@pytest.mark.parametrize("system", [None, "be brief", ""])
def test_chat_prompt_equals_reference_renderer(system):
    """--chat renders what bringup.formats.chat.render_chat_format renders from the same format data."""
    p = tiny_pipeline(chat=True)
    args = ["--chat", "--prompt", " hi ", "--max-tokens", "1", "--json"] + (["--system", system] if system is not None else [])
    doc = json.loads(run(*args, p=p, check_rc=0).stdout)
    msgs = ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": " hi "}]
    assert doc["prompt_tokens"] == _tokens_of(chat.render_chat_format(CHAT["render"], msgs, True))


@pytest.mark.slow   # builds another whole (tiny) model: the fast lane builds one per session
def test_chat_merge_system_and_trim(tmp_path):
    """The gemma-style rules (system merged into the first user turn, contents trimmed), checked
    through the C renderer directly on a weights file whose chat.format says so."""
    fmt = {"name": "m", "stop_strings": [], "render": {
        "roles": {"user": {"prefix": "U:", "suffix": "<|im_end|>"}, "assistant": {"prefix": "A:", "suffix": "<|im_end|>"}},
        "generation_prompt": "A:", "default_system": None, "system": "merge_into_first_user",
        "system_separator": "--", "trim_content": True}}
    q = tiny_chat_pipeline(fmt)   # its own weights file and library: chat.format is in the payload
    for system, user in ((" sys ", " hi "), ("", "x"), (None, " y ")):
        args = ["--chat", "--prompt", user, "--max-tokens", "1", "--json"] + (["--system", system] if system is not None else [])
        doc = json.loads(run(*args, p=q, check_rc=0).stdout)
        msgs = ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": user}]
        assert doc["prompt_tokens"] == _tokens_of(chat.render_chat_format(fmt["render"], msgs, True))


def test_interactive_loop_keeps_the_conversation():
    p = tiny_pipeline(chat=True)
    r = run("--max-tokens", "3", "--no-stop", p=p, input="hello\nagain\n\n", check_rc=0)
    assert r.stdout.count("\n") == 2 and "interactive chat" in r.stderr


@pytest.mark.slow
def test_smollm2_answers_and_matches_llama_cpp(smollm2_gguf, tmp_path):
    """Acceptance (issue 5): coherent English from the real weights, and the greedy continuation of
    a fixed prompt equals llama.cpp's for at least 32 tokens.

    The prompt is code, whose continuation has no near-tie in its first 40 tokens: on prose
    prompts llama.cpp and bringup can part at a near-tie (e.g. a 0.02 logit gap), because
    llama.cpp's CPU matmul quantizes the activations to Q8 and the reference kernels do not
    (docs/runtime.md, "Parity with llama.cpp")."""
    p = run_pipeline(tmp_path, smollm2_gguf)
    with oracles.LlamaCppOracle(smollm2_gguf, n_ctx=512) as o:
        prompt = o.tokenize("def fibonacci(n):\n", add_special=True)
        want = o.greedy(prompt, 32)
    r = run("--prompt-tokens", ",".join(map(str, prompt)), "--max-tokens", "32", "--json", "--no-stop", p=p,
            check_rc=0)
    ours = json.loads(r.stdout)["generated_tokens"]
    assert len(want) >= 32 and ours[:32] == want[:32]
    question = ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    r = run("--prompt", question, "--max-tokens", "24", "--json", p=p, check_rc=0)
    doc = json.loads(r.stdout)
    assert "Paris" in doc["text"], doc["text"]


# -- --dump-hidden: every prefill op's output (docs/parity.md dump format), read by bringup.parity.xray --

def _ir_ops(phase="prefill"):
    return block.expand(json.loads((tiny_pipeline()["ir"] / f"ir_{phase}.json").read_text()))


def test_dump_hidden_covers_every_op_and_every_row_across_chunks(tmp_path, ref):
    toks = [104, 101, 108, 108, 111, 32, 119, 111, 114]   # 9 tokens: chunks of 4, 4, 1
    run("--prompt-tokens", ",".join(map(str, toks)), "--max-tokens", "0", "--dump-hidden", tmp_path / "d",
        "--all-logits", tmp_path / "l.f32", check_rc=0)
    man = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert (man["format"], man["version"], man["n_tokens"], man["skipped"]) == ("bringup-hidden-dump", 1, 9, [])
    ops = _ir_ops()
    # one tensor per IR op, in IR order, named by the IR op id, [T, elements per token row]
    assert [t["name"] for t in man["tensors"]] == [op["id"] for op in ops]
    tensors = json.loads((tiny_pipeline()["ir"] / "ir_prefill.json").read_text())["tensors"]
    for t, op in zip(man["tensors"], ops):
        shape = tensors[next(iter(op["outputs"].values()))]["shape"]
        assert t["shape"] == [9, int(np.prod(shape[1:]))] and t["file"] == t["name"] + ".f32"
    dump = xray.load_dump(tmp_path / "d")
    # the logits tail ran for every row: the dumped head equals the teacher-forced logits bit for bit
    logits = np.fromfile(tmp_path / "l.f32", dtype="<f4").reshape(9, N_VOCAB)
    np.testing.assert_array_equal(dump["footer.lm_head"], logits)
    # rows of later chunks are the same as when the prompt stops there (causal): chunking is invisible
    run("--prompt-tokens", ",".join(map(str, toks[:5])), "--max-tokens", "0", "--dump-hidden", tmp_path / "e",
        check_rc=0)
    part = xray.load_dump(tmp_path / "e")
    for name in ("header.embed", "layer.1.attn", "layer.1.ffn_residual", "footer.output_norm"):
        np.testing.assert_array_equal(part[name], dump[name][:5])
    # and the program's op outputs are the reference's checkpoints (Q8 activation rounding: the
    # tolerance of tests/test_xray_native.py)
    res = xray.xray_against_reference(ref, toks, dump, rel_tol=0.2)
    assert res["missing"] == [] and res["first_divergent"] is None, res["summary"]
    assert max(c["rel_err"] for c in res["checkpoints"]) < 0.1


def test_dump_hidden_refusals(tmp_path):
    r = run("--prompt-tokens", "1,2,3", "--dump-hidden", tmp_path / "d", check_rc=2)
    assert "--max-tokens 0" in r.stderr
    r = run("--dump-hidden", tmp_path / "d", "--max-tokens", "0", check_rc=2)
    assert "needs a prompt" in r.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep")
    r = run("--prompt-tokens", "1,2,3", "--max-tokens", "0", "--dump-hidden", tmp_path / "full", check_rc=2)
    assert "not empty" in r.stderr and (tmp_path / "full" / "x").read_text() == "keep"
    # an empty folder is filled; nothing is left beside it (the staging folder is renamed onto it)
    (tmp_path / "empty").mkdir()
    run("--prompt-tokens", "1,2,3", "--max-tokens", "0", "--dump-hidden", tmp_path / "empty", check_rc=0)
    assert (tmp_path / "empty" / "manifest.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "full"]
    # "DIR/" names the same folder (the staging folder is its sibling, not inside it)
    run("--prompt-tokens", "1,2,3", "--max-tokens", "0", "--dump-hidden", f"{tmp_path / 'slash'}/", check_rc=0)
    assert (tmp_path / "slash" / "manifest.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "full", "slash"]


def test_dump_hidden_failure_leaves_nothing(tmp_path):
    """A run that fails (here: a prompt longer than the context) leaves neither DIR nor a staging folder."""
    r = run("--prompt-tokens", ",".join(["5"] * 70), "--max-tokens", "0", "--dump-hidden", tmp_path / "d",
            check_rc=2)
    assert "context" in r.stderr
    assert list(tmp_path.iterdir()) == []
