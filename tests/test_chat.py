"""Chat formats: the circuit's declarative chat data against the model's own chat template.

References: smollm2's GGUF jinja template (rendered in the sandbox); for gemma3, whose GGUF has no
template, llama.cpp's built-in "gemma" chat format (src/llama-chat.cpp, through
llama_chat_apply_template) and llama.cpp's copy of Google's Gemma jinja template
(models/templates/google-gemma-2-2b-it.jinja; Gemma 3 keeps its turn format
`<start_of_turn>user\\n...<end_of_turn>\\n<start_of_turn>model\\n`).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from bringup.formats import chat
from bringup.core.errors import BringupError
from tests.helpers.tokenizer import FastGGUFMeta, gguf_tokenizer_json

# The chat-format data for circuits/*.json (see the engineer's report).
CHATML_SMOLLM2 = {
    "roles": {
        "system": {"prefix": "<|im_start|>system\n", "suffix": "<|im_end|>\n"},
        "user": {"prefix": "<|im_start|>user\n", "suffix": "<|im_end|>\n"},
        "assistant": {"prefix": "<|im_start|>assistant\n", "suffix": "<|im_end|>\n"},
    },
    "generation_prompt": "<|im_start|>assistant\n",
    "default_system": "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    "system": "turn",
    "system_separator": "",
    "trim_content": False,
}

GEMMA3 = {
    "roles": {
        "user": {"prefix": "<start_of_turn>user\n", "suffix": "<end_of_turn>\n"},
        "assistant": {"prefix": "<start_of_turn>model\n", "suffix": "<end_of_turn>\n"},
    },
    "generation_prompt": "<start_of_turn>model\n",
    "default_system": None,
    "system": "merge_into_first_user",
    "system_separator": "\n\n",
    "trim_content": True,
}

U, A, S = "user", "assistant", "system"


def conv(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


CONVERSATIONS = [
    conv((U, "Hello!")),
    conv((S, "You are terse."), (U, "What is 2+2?")),
    conv((U, "Hi"), (A, "Hello! How can I help?"), (U, "Tell me a joke.")),
    conv((S, "Be kind.\nAlways."), (U, "Line one\nline two"), (A, "Sure:\n- a\n- b"), (U, "Thanks 🙏")),
    conv((U, "  padded content  \n"), (A, "\tanswer\n"), (U, "ünïcödé — 中文 — emoji 🚀")),
    conv((U, "")),
    conv((U, "Code:\n```python\nprint('x')\n```"), (A, "OK"), (U, "{{ not jinja }} {% raw %}")),
]


@pytest.fixture(scope="module")
def smollm2_tmpl(smollm2_gguf) -> str:
    return gguf_tokenizer_json(smollm2_gguf)["chat_template"]


@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("i", range(len(CONVERSATIONS)))
def test_smollm2_chat_format_equals_gguf_template(smollm2_tmpl, i, gen):
    msgs = CONVERSATIONS[i]
    want = chat.render_template(smollm2_tmpl, msgs, add_generation_prompt=gen)
    assert chat.render_chat_format(CHATML_SMOLLM2, msgs, add_generation_prompt=gen) == want


def _llama_cpp_builtin(llama_cpp, name: bytes, msgs: list[dict], add_ass: bool) -> str:
    arr = (llama_cpp.llama_chat_message * len(msgs))()
    keep = []
    for k, m in enumerate(msgs):
        role, content = m["role"].encode(), m["content"].encode()
        keep += [role, content]
        arr[k].role, arr[k].content = role, content
    n = llama_cpp.llama_chat_apply_template(name, arr, len(msgs), add_ass, None, 0)
    assert n >= 0, f"llama.cpp has no built-in chat template {name!r}"
    buf = ctypes.create_string_buffer(n + 1)
    assert llama_cpp.llama_chat_apply_template(name, arr, len(msgs), add_ass, buf, n + 1) == n
    return buf.raw[:n].decode("utf-8")


@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("i", range(len(CONVERSATIONS)))
def test_gemma3_chat_format_equals_llama_cpp_gemma(i, gen):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python (the [oracle] extra) is the reference")
    msgs = CONVERSATIONS[i]
    want = _llama_cpp_builtin(llama_cpp, b"gemma", msgs, gen)
    assert chat.render_chat_format(GEMMA3, msgs, add_generation_prompt=gen) == want


# Google's Gemma jinja template refuses system messages; those are covered by llama.cpp's format
NO_SYSTEM = [i for i, c in enumerate(CONVERSATIONS) if c[0]["role"] != S]


@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("i", NO_SYSTEM)
def test_gemma3_chat_format_equals_gemma_jinja(llama_vocab_dir, i, gen):
    msgs = CONVERSATIONS[i]
    tmpl = (Path(llama_vocab_dir) / "templates" / "google-gemma-2-2b-it.jinja").read_text()
    want = chat.render_template(tmpl, msgs, add_generation_prompt=gen, bos_token="")
    assert chat.render_chat_format(GEMMA3, msgs, add_generation_prompt=gen) == want


def test_gemma3_gguf_has_no_template(gemma3_gguf):
    assert "tokenizer.chat_template" not in FastGGUFMeta(gemma3_gguf).fields
    assert gguf_tokenizer_json(gemma3_gguf)["chat_template"] is None


# --- the sandbox and the error paths ------------------------------------------------------------

@pytest.mark.parametrize("tmpl,match", [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "sandbox forbids|undefined"),
    ("{% set _ = messages.append({'role': 'user', 'content': 'x'}) %}", "sandbox forbids"),
    ("{{ messages[0].content.upper.__globals__ }}", "sandbox forbids|has no attribute"),
    ("{{ no_such_variable }}", "undefined"),
    ("{{ raise_exception('nope') }}", "refused the conversation: nope"),
    ("{% for %}", "TemplateSyntaxError"),
    # errors of the template's own code, not jinja's: still the template's fault, never a traceback
    ("{{ 1 / 0 }}", "ZeroDivisionError"),
    ("{{ messages | length + 'x' }}", "TypeError"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError"),
])
def test_template_errors_are_clear(tmpl, match):
    with pytest.raises(BringupError, match=match):
        chat.render_template(tmpl, conv((U, "hi")), add_generation_prompt=True)


def test_bad_messages_and_formats():
    with pytest.raises(BringupError, match="chat messages is invalid"):
        chat.render_chat_format(CHATML_SMOLLM2, [{"role": "tool", "content": "x"}], True)
    with pytest.raises(BringupError, match="allowed only first"):
        chat.render_chat_format(CHATML_SMOLLM2, conv((U, "a"), (S, "b")), True)
    with pytest.raises(BringupError, match="must be followed by a user message"):
        chat.render_chat_format(GEMMA3, conv((S, "a"), (A, "b")), True)
    bad = {**CHATML_SMOLLM2, "roles": {k: v for k, v in CHATML_SMOLLM2["roles"].items() if k != S}}
    with pytest.raises(BringupError, match="chat format is invalid"):
        chat.render_chat_format(bad, conv((U, "a")), True)
    with pytest.raises(BringupError, match="chat format is invalid"):
        chat.validate_chat_format({**GEMMA3, "extra": 1})


@pytest.mark.parametrize("circuit,name,verified", [("llama", "chatml_smollm2", CHATML_SMOLLM2),
                                                    ("gemma3", "gemma", GEMMA3)])
def test_circuit_chat_data_is_the_verified_data(circuit, name, verified):
    """The chat formats the circuits carry are the ones checked above against the templates."""
    import json

    from bringup.core.paths import CIRCUITS
    formats = json.loads((CIRCUITS / f"{circuit}.json").read_text())["contracts"]["chat"]["formats"]
    render = {f["name"]: f["render"] for f in formats}[name]
    assert render == verified


def test_templates_that_test_for_tools_render():
    """transformers passes tools=None / documents=None when there are none; under StrictUndefined
    a template that tests `{% if tools %}` (Qwen2.5's) must still render, not fail."""
    tmpl = ("{% if tools %}TOOLS{% endif %}{% if documents %}DOCS{% endif %}"
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    assert chat.render_template(tmpl, [{"role": "user", "content": "hi"}], False) == "<user>hi"
