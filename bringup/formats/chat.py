"""Chat prompts: a GGUF's jinja chat template, and the declarative chat format the native CLI uses.

Two renderers of the same thing, so a test can hold one against the other:

* ``render_template`` renders ``tokenizer.chat_template`` (jinja, text from the model file, so
  untrusted) only inside ``jinja2.sandbox.ImmutableSandboxedEnvironment``, with the environment
  Hugging Face transformers uses for chat templates (trim_blocks, lstrip_blocks, loop controls,
  ``raise_exception``) and StrictUndefined, so a template that reads a variable we do not give
  fails loudly instead of rendering an empty string. It is the one renderer of GGUF templates
  (parity renders its chat prompts with it); every way a template can fail is a BringupError.
* ``render_chat_format`` renders a conversation from chat-format data (a circuit's ``chat``
  object: per-role turn prefix/suffix, generation prompt, system handling; schema
  ``CHAT_FORMAT_SCHEMA``). This is what the C CLI implements for ``--chat``; it never runs jinja.

Neither output contains the BOS token: the tokenizer adds it when the model's add_bos says so
(encode with BU_TOK_ADD_SPECIAL), and special-token texts in the rendered prompt are matched as
tokens by encoding with BU_TOK_PARSE_SPECIAL.
"""
from __future__ import annotations

from typing import Any

import jinja2
import jsonschema

from bringup.core.errors import BringupError
from bringup.formats.jinja_bounds import BoundedSandbox, TemplateLimitError

ROLES = ("system", "user", "assistant")

#: whitespace removed by ``trim_content``: C isspace() in the "C" locale, as llama.cpp's chat
#: code trims (src/llama-chat.cpp trim); a C implementation can do exactly the same
TRIM_CHARS = " \t\n\v\f\r"

_TURN = {"type": "object", "additionalProperties": False, "required": ["prefix", "suffix"],
         "properties": {"prefix": {"type": "string"}, "suffix": {"type": "string"}}}

CHAT_FORMAT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "chat format (a circuit's 'chat' object)",
    "type": "object",
    "additionalProperties": False,
    "required": ["roles", "generation_prompt", "default_system", "system", "system_separator", "trim_content"],
    "properties": {
        "roles": {
            "type": "object", "additionalProperties": False, "required": ["user", "assistant"],
            "properties": {"system": _TURN, "user": _TURN, "assistant": _TURN},
        },
        # text that opens the assistant's turn when a reply is wanted
        "generation_prompt": {"type": "string"},
        # system message content used when the conversation does not start with one (null: none)
        "default_system": {"type": ["string", "null"]},
        # "turn": the system message is a turn of its own (roles.system needed);
        # "merge_into_first_user": its content + system_separator opens the first user message
        "system": {"enum": ["turn", "merge_into_first_user"]},
        "system_separator": {"type": "string"},
        # strip TRIM_CHARS from both ends of every message content before rendering
        "trim_content": {"type": "boolean"},
    },
    "allOf": [{"if": {"properties": {"system": {"const": "turn"}}},
               "then": {"properties": {"roles": {"required": ["system"]}}}}],
}

_MESSAGES_SCHEMA = {
    "type": "array",
    "items": {"type": "object", "additionalProperties": False, "required": ["role", "content"],
              "properties": {"role": {"enum": list(ROLES)}, "content": {"type": "string"}}},
}


def _check(obj: Any, schema: dict, what: str) -> None:
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        items = [f"at /{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:10]]
        raise BringupError(f"{what} is invalid: " + "; ".join(items))


def validate_chat_format(fmt: Any) -> None:
    """Check chat-format data against CHAT_FORMAT_SCHEMA; BringupError lists every violation."""
    _check(fmt, CHAT_FORMAT_SCHEMA, "chat format")


def validate_messages(messages: Any) -> None:
    """Check a conversation: a list of {"role": system|user|assistant, "content": str}."""
    _check(messages, _MESSAGES_SCHEMA, "chat messages")


def _raise_exception(message: str) -> None:
    raise BringupError(f"chat template refused the conversation: {message}")


def render_template(template: str, messages: list[dict], add_generation_prompt: bool,
                    bos_token: str = "", eos_token: str = "") -> str:
    """Render a GGUF chat template (jinja source) for ``messages`` in jinja2's immutable sandbox.

    ``bos_token`` / ``eos_token`` are the texts the template may splice (default empty: the
    tokenizer adds BOS itself). Raises BringupError when the template does not compile, reads an
    undefined variable, calls ``raise_exception``, tries something the sandbox forbids, or fails
    in any other way while it runs (a division by zero, adding a number to a string): the
    template is model data, so whatever it does wrong is a bad input, never a traceback.
    Rendering is bounded in steps, time and size (``bringup.formats.jinja_bounds``): a runaway
    loop or a huge string is a TemplateLimitError (a BringupError) within seconds.
    """
    validate_messages(messages)
    env = BoundedSandbox(
        trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined, autoescape=False,
        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise_exception
    try:
        # tools and documents are None as in transformers' apply_chat_template without them, so
        # templates that test `{% if tools %}` (Qwen2.5's) render under StrictUndefined.
        return env.render(template, messages=messages, add_generation_prompt=add_generation_prompt,
                          bos_token=bos_token, eos_token=eos_token, tools=None, documents=None)
    except BringupError:
        raise
    except (MemoryError, RecursionError) as e:
        what = "memory" if isinstance(e, MemoryError) else "the stack"
        raise TemplateLimitError(f"chat template exhausted {what} ({type(e).__name__})") from None
    except jinja2.exceptions.SecurityError as e:
        raise BringupError(f"chat template tried an operation the sandbox forbids: {e}") from e
    except Exception as e:  # noqa: BLE001 - any error raised while untrusted template code runs
        raise BringupError(f"chat template failed: {type(e).__name__}: {e}") from e


def render_chat_format(fmt: dict, messages: list[dict], add_generation_prompt: bool) -> str:
    """Render ``messages`` with chat-format data ``fmt`` (CHAT_FORMAT_SCHEMA).

    Rules, in order: when the first message is not a system message and ``default_system`` is a
    string, a system message with that content is put first. A system message is allowed only
    first. With ``system == "turn"`` it is rendered like any turn; with
    ``"merge_into_first_user"`` its content + ``system_separator`` is put before the content of
    the next message, which must be a user message (an empty system content adds nothing). Every turn is
    ``roles[role].prefix + content + roles[role].suffix`` (content stripped of TRIM_CHARS first
    when ``trim_content``); ``generation_prompt`` ends the text when ``add_generation_prompt``.
    Raises BringupError for invalid data or a conversation the format cannot express.
    """
    validate_chat_format(fmt)
    validate_messages(messages)
    msgs = [dict(m) for m in messages]
    if (not msgs or msgs[0]["role"] != "system") and fmt["default_system"] is not None:
        msgs.insert(0, {"role": "system", "content": fmt["default_system"]})

    def content(m: dict) -> str:
        return m["content"].strip(TRIM_CHARS) if fmt["trim_content"] else m["content"]

    out = []
    pending_system = None
    for i, m in enumerate(msgs):
        role = m["role"]
        if role == "system":
            if i != 0:
                raise BringupError(f"chat format: a system message is allowed only first (message {i})")
            if fmt["system"] == "merge_into_first_user":
                if len(msgs) < 2 or msgs[1]["role"] != "user":
                    raise BringupError("chat format: this model has no system turn; a system message "
                                       "must be followed by a user message to merge into")
                # an empty system message adds nothing, not even the separator (llama.cpp's gemma)
                pending_system = content(m) or None
                continue
        turn = fmt["roles"][role]
        text = content(m)
        if pending_system is not None:
            text = pending_system + fmt["system_separator"] + text
            pending_system = None
        out.append(turn["prefix"] + text + turn["suffix"])
    if add_generation_prompt:
        out.append(fmt["generation_prompt"])
    return "".join(out)


CHAT_MAGIC = b"BUCHAT2\0"
CHAT_MAX_STOP = 8   # CF_MAX_STOP in csrc/cli/chat.h


def pack_chat_format(fmt: dict) -> bytes:
    """The ``chat.format`` BUMP tensor (I8) the CLI reads for ``--chat`` and the interactive loop
    (docs/runtime.md). ``fmt`` is one entry of a circuit's ``contracts.chat.formats`` (as chosen by
    ``bringup.ir.circuits.choose_chat_format``); its ``render`` object (``bringup.formats.chat.CHAT_FORMAT_SCHEMA``,
    the data ``bringup.formats.chat.render_chat_format`` renders) is what the C CLI implements.

    Layout: ``BUCHAT2\\0`` then NUL-terminated UTF-8 strings: name; "1"/"0" has a system role;
    system prefix, suffix; user prefix, suffix; assistant prefix, suffix; generation prompt;
    "1"/"0" has a default system message; the default system message; "turn" or
    "merge_into_first_user"; the system separator; "1"/"0" trim content; the decimal count of stop
    strings (<= CHAT_MAX_STOP); the stop strings. Raises BringupError for render data that fails
    the schema, a NUL inside a string, or too many stop strings.
    """
    if not isinstance(fmt, dict) or "render" not in fmt:
        raise BringupError("chat format lacks its 'render' object")
    r = fmt["render"]
    validate_chat_format(r)
    stops = list(fmt.get("stop_strings", []))
    if len(stops) > CHAT_MAX_STOP:
        raise BringupError(f"chat format has {len(stops)} stop strings; the CLI takes at most {CHAT_MAX_STOP}")
    roles = r["roles"]
    empty = {"prefix": "", "suffix": ""}
    sysr = roles.get("system", empty)
    strings = [str(fmt.get("name", "")), "1" if "system" in roles else "0", sysr["prefix"], sysr["suffix"],
               roles["user"]["prefix"], roles["user"]["suffix"], roles["assistant"]["prefix"],
               roles["assistant"]["suffix"], r["generation_prompt"],
               "0" if r["default_system"] is None else "1", r["default_system"] or "", r["system"],
               r["system_separator"], "1" if r["trim_content"] else "0", str(len(stops)), *stops]
    out = bytearray(CHAT_MAGIC)
    for x in strings:
        if not isinstance(x, str) or "\0" in x:
            raise BringupError(f"chat format string {x!r} is not a NUL-free string")
        out += x.encode("utf-8") + b"\0"
    return bytes(out)
