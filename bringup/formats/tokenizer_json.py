"""tokenizer.json: the tokenizer of a GGUF file as data (docs/architecture.md, "tokenizer.json").

``from_gguf`` reads the ``tokenizer.*`` keys of a GGUF file (key names: gguf-py's
``gguf.Keys.Tokenizer``; meaning: llama.cpp src/llama-vocab.cpp ``llama_vocab::impl::load``).
Every value that is not read from a key is a documented default whose origin is written in
``source_keys``, so nothing is assumed silently.
"""
from __future__ import annotations

import json

from typing import Any

import gguf
import jsonschema

from bringup.core.paths import SCHEMAS
from bringup.core.errors import BringupError, IntegrityError, UnsupportedError

K = gguf.Keys.Tokenizer

#: llama.cpp's text rules (llama-vocab.cpp, "auto-detect special tokens by text") for special ids the
#: GGUF does not give by key: (GGUF key, texts). The token found is also typed control. llama.cpp
#: takes whichever listed text its hash map yields first; we take the first listed text present.
DETECTED_SPECIALS = {
    "eot": (K.EOT_ID, ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                       "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
                       "<end_of_utterance>")),
    "eom": (K.EOM_ID, ("<|eom_id|>",)),
    "fim_pre": (K.FIM_PRE_ID, ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                               "▁<PRE>", "<|code_prefix|>", "<|prefix|>")),
    "fim_suf": (K.FIM_SUF_ID, ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                               "▁<SUF>", "<|code_suffix|>", "<|suffix|>")),
    "fim_mid": (K.FIM_MID_ID, ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                               "▁<MID>", "<|code_middle|>", "<|middle|>")),
    "fim_pad": (K.FIM_PAD_ID, ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")),
    "fim_rep": (K.FIM_REP_ID, ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")),
    "fim_sep": (K.FIM_SEP_ID, ("<|file_sep|>",)),
}
#: FIM tokens that llama.cpp counts as end of generation
EOG_FIM = ("fim_pad", "fim_rep", "fim_sep")
#: llama.cpp marks tokens with these texts as control tokens (end-of-generation list) even when the
#: GGUF types them otherwise; the same promotion keeps our special-token matching equal to its.
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
             "<｜end▁of▁sentence｜>", "[e~[")

#: pre-tokenizers for which llama.cpp turns add_bos on by default (llama-vocab.cpp)
_ADD_BOS_PRE = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                "jina-v5-nano", "tekken", "chameleon"}

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3
#: end-of-generation texts that make '</s>' an ordinary token (llama-vocab.cpp: gemma4, plamo)
_NORMAL_S_MARKERS = ("<|tool_response>", "<|plamo:eos|>")

#: the tokenizer models bringup implements (llama-vocab.cpp: BPE for gpt2 and gemma4, SPM for llama)
MODELS = ("gpt2", "llama", "gemma4")
#: why the other tokenizer models of llama.cpp's vocabulary set are refused
_REFUSED_MODELS = {
    "bert": "WordPiece, the tokenizer of encoder models (BERT); bringup runs decoder-only models",
    "t5": "Unigram with a precompiled normalizer, the tokenizer of T5 and encoder models; bringup runs "
          "decoder-only models",
}

# The schema lives with every other schema (config/schemas/tokenizer.schema.json). Item types of
# the four vocabulary-sized arrays are checked by _check_items: jsonschema takes ~30 s per
# item-checked 150k-entry array, so the schema leaves those to plain Python.
TOKENIZER_SCHEMA: dict[str, Any] = json.loads((SCHEMAS / "tokenizer.schema.json").read_text())


#: array field -> (allowed item types, what the items are)
_ITEMS = {"tokens": ((str,), "strings"), "scores": ((float, int), "numbers"),
          "token_types": ((int,), "integers 0..6"), "merges": ((str,), "strings")}


def _check_items(tok: dict) -> list[str]:
    bad = []
    for field, (kinds, what) in _ITEMS.items():
        arr = tok.get(field)
        if not isinstance(arr, list):
            continue
        for i, x in enumerate(arr):
            ok = isinstance(x, kinds) and not isinstance(x, bool)
            if ok and field == "token_types":
                ok = 0 <= x <= 6
            if not ok:
                bad.append(f"  at /{field}/{i}: {x!r} is not one of {what}")
                break
    return bad


def validate_tokenizer_json(tok: Any) -> None:
    """Validate a tokenizer.json dict against TOKENIZER_SCHEMA; BringupError lists the violations."""
    v = jsonschema.Draft202012Validator(TOKENIZER_SCHEMA)
    errors = sorted(v.iter_errors(tok), key=lambda e: list(e.absolute_path))
    lines = [f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:10]]
    if not errors:
        lines = _check_items(tok)
    if lines:
        raise BringupError("tokenizer.json does not match its schema:\n" + "\n".join(lines))


def _scalar(reader: gguf.GGUFReader, key: str, kind: type):
    """The value of scalar ``key`` stored with a GGUF type of ``kind`` (bool: BOOL, int: an
    integer type, str: STRING), None when absent; a value of another type is refused, never
    converted: BringupError (exit 2) naming the key and its stored types (gguf_types' rule)."""
    f = reader.fields.get(key)
    if f is None:
        return None
    if len(f.types) != 1 or f.types[0] == gguf.GGUFValueType.ARRAY:
        raise BringupError(f"GGUF key {key}: expected a scalar, got {[t.name for t in f.types]}")
    v = f.contents()
    if kind is bool:
        if f.types[0] != gguf.GGUFValueType.BOOL:
            raise BringupError(f"GGUF key {key}: expected BOOL, got {f.types[0].name}")
        return bool(v)
    if kind is int:
        if f.types[0] not in (gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32, gguf.GGUFValueType.UINT64,
                              gguf.GGUFValueType.INT64, gguf.GGUFValueType.UINT16, gguf.GGUFValueType.INT16,
                              gguf.GGUFValueType.UINT8, gguf.GGUFValueType.INT8):
            raise BringupError(f"GGUF key {key}: expected an integer, got {f.types[0].name}")
        return int(v)
    if f.types[0] != gguf.GGUFValueType.STRING:
        raise BringupError(f"GGUF key {key}: expected STRING, got {f.types[0].name}")
    return str(v)


def _array(reader: gguf.GGUFReader, key: str, item_types: tuple) -> list | None:
    f = reader.fields.get(key)
    if f is None:
        return None
    if len(f.types) != 2 or f.types[0] != gguf.GGUFValueType.ARRAY or f.types[1] not in item_types:
        raise BringupError(f"GGUF key {key}: expected an array of {[t.name for t in item_types]}, "
                             f"got {[t.name for t in f.types]}")
    return list(f.contents())


def unsupported_model(model: str) -> str:
    """The one-line reason why tokenizer model ``model`` (not in MODELS) is refused."""
    why = f": {_REFUSED_MODELS[model]}" if model in _REFUSED_MODELS else ""
    return f"tokenizer model {model!r} is not supported{why} (supported: {', '.join(MODELS)})"


def effective_pre(model: str, pre: str | None) -> str:
    """The pre-tokenizer llama.cpp uses for tokenizer model ``model`` given the value ``pre`` of
    tokenizer.ggml.pre (None: absent): 'gemma4' for the gemma4 model whatever the key says,
    'default' for an absent key, else the key's value."""
    if model == "gemma4":
        return "gemma4"
    return "default" if pre is None else pre


def _tokenizer_model(reader: gguf.GGUFReader, src: dict[str, str]) -> tuple[str, str]:
    """(tokenizer model, effective pre-tokenizer); UnsupportedError for a missing or unknown model."""
    model = _scalar(reader, K.MODEL, str)
    if model is None:
        raise UnsupportedError(f"GGUF has no {K.MODEL}: a model without a tokenizer is not supported")
    if model not in MODELS:
        raise UnsupportedError(unsupported_model(model))
    src["model"] = K.MODEL

    key_pre = _scalar(reader, K.PRE, str)
    pre = effective_pre(model, key_pre)
    if model == "gemma4":
        src["pre"] = f"model: llama.cpp sets 'gemma4' for tokenizer model 'gemma4' ({K.PRE} is {key_pre!r})"
    elif key_pre is None:
        # llama.cpp also falls back to 'default', with a loud warning that quality may suffer
        src["pre"] = f"absent: {K.PRE} missing, 'default' as llama.cpp"
    else:
        src["pre"] = K.PRE
    return model, pre


def _vocabulary(reader: gguf.GGUFReader, src: dict[str, str]) -> tuple[list[str], list[float] | None, list[int]]:
    """(token texts, scores or None, token types 0..6), one entry per id; IntegrityError for an
    empty vocabulary, a length mismatch or a type outside GGUF's."""
    tokens = _array(reader, K.LIST, (gguf.GGUFValueType.STRING,))
    if not tokens:
        raise IntegrityError(f"GGUF has no (or an empty) {K.LIST}")
    tokens = [str(t) for t in tokens]
    n = len(tokens)
    src["tokens"] = K.LIST

    scores = _array(reader, K.SCORES, (gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.INT32))
    if scores is not None:
        if len(scores) != n:
            raise IntegrityError(f"{K.SCORES} has {len(scores)} entries for {n} tokens")
        scores = [float(s) for s in scores]
        src["scores"] = K.SCORES
    else:
        src["scores"] = f"absent: {K.SCORES} missing (every score 0, as llama.cpp)"

    types = _array(reader, K.TOKEN_TYPE, (gguf.GGUFValueType.INT32,))
    if types is None:
        types = [1] * n
        src["token_types"] = f"absent: {K.TOKEN_TYPE} missing, every token normal (1) as llama.cpp"
    else:
        if len(types) != n:
            raise IntegrityError(f"{K.TOKEN_TYPE} has {len(types)} entries for {n} tokens")
        types = [int(t) for t in types]
        src["token_types"] = K.TOKEN_TYPE
    for i, t in enumerate(types):
        if not 0 <= t <= 6:
            raise IntegrityError(f"{K.TOKEN_TYPE}[{i}] = {t} is not a GGUF token type (0..6)")
    return tokens, scores, types


def _merges(reader: gguf.GGUFReader, model: str, src: dict[str, str]) -> list[str] | None:
    """The BPE merges (required by a BPE model), or None for llama (SentencePiece), which has none."""
    merges = _array(reader, K.MERGES, (gguf.GGUFValueType.STRING,))
    if model != "llama":
        if merges is None:
            raise IntegrityError(f"{model} tokenizer without {K.MERGES}")
        src["merges"] = K.MERGES
        return [str(m) for m in merges]
    if merges:
        raise UnsupportedError(f"llama (SentencePiece) tokenizer with {K.MERGES} is not supported")
    src["merges"] = "absent: not used by the llama (SentencePiece) model"
    return None


def _special_ids(reader: gguf.GGUFReader, model: str, n: int, src: dict[str, str]) -> dict[str, int | None]:
    """bos/eos/unk/pad/eot/eom: the key if present; llama (SPM) has llama.cpp's defaults bos 1,
    eos 2, unk 0; otherwise None. IntegrityError for an id outside the vocabulary of ``n`` tokens."""
    defaults = {"bos": 1, "eos": 2, "unk": 0} if model == "llama" else {}
    keys = {"bos": K.BOS_ID, "eos": K.EOS_ID, "unk": K.UNK_ID, "pad": K.PAD_ID, "eot": K.EOT_ID, "eom": K.EOM_ID}
    special: dict[str, int | None] = {}
    for name, key in keys.items():
        v = _scalar(reader, key, int)
        if v is not None:
            if not 0 <= v < n:
                raise IntegrityError(f"GGUF key {key} = {v} is outside the vocabulary of {n} tokens")
            special[name] = v
            src[f"special.{name}"] = key
        elif name in defaults and defaults[name] < n:
            special[name] = defaults[name]
            src[f"special.{name}"] = f"default: {key} missing, llama.cpp's SPM default {defaults[name]}"
        else:
            special[name] = None
            src[f"special.{name}"] = f"absent: {key} missing"
    return special


def _promote(i: int, tokens: list[str], types: list[int], promoted: list[str]) -> None:
    """Type token ``i`` control, as llama.cpp does for a special text, and note it in ``promoted``."""
    if types[i] != TOKEN_TYPE_CONTROL:
        types[i] = TOKEN_TYPE_CONTROL
        promoted.append(f"{i} {tokens[i]!r}")


def _detected_specials(reader: gguf.GGUFReader, tokens: list[str], types: list[int], special: dict,
                       src: dict[str, str], promoted: list[str]) -> tuple[dict[str, int | None], dict[str, int]]:
    """llama.cpp's text rule (DETECTED_SPECIALS) for the eot/eom/FIM ids no key gives: ``special``
    updated in place, the FIM ids returned with the text -> id index (a repeated text: its last id)."""
    n = len(tokens)
    index = {}
    for i, t in enumerate(tokens):
        index[t] = i    # a repeated text maps to its last id, as llama.cpp's token_to_id
    fim: dict[str, int | None] = {}
    for name, (key, texts) in DETECTED_SPECIALS.items():
        if name in special:
            v = special[name]
            from_key = src[f"special.{name}"] == key
        else:
            v = _scalar(reader, key, int)
            if v is not None and not 0 <= v < n:
                raise IntegrityError(f"GGUF key {key} = {v} is outside the vocabulary of {n} tokens")
            from_key = v is not None
        if not from_key:
            v = next((index[t] for t in texts if t in index), None)
            if v is not None:
                _promote(v, tokens, types, promoted)
                if name in special:
                    src[f"special.{name}"] = f"detected: token text {tokens[v]!r} (llama.cpp's text rule)"
        if name in special:
            special[name] = v
        else:
            fim[name] = v
    return fim, index


def _end_of_generation(tokens: list[str], types: list[int], special: dict, fim: dict, index: dict[str, int],
                       src: dict[str, str], promoted: list[str]) -> tuple[set[int], list[str]]:
    """The end-of-generation ids as llama.cpp collects them, and the promotions that stand."""
    eog = {fim[k] for k in EOG_FIM if fim[k] is not None}
    for text in EOG_TEXTS:
        i = index.get(text)
        if i is not None:
            eog.add(i)
            _promote(i, tokens, types, promoted)
    eog.update(special[k] for k in ("eos", "eot", "eom") if special[k] is not None)
    src["eog"] = ("eos, eot, eom, the FIM pad/repo/file-separator tokens and every token whose text is in "
                  "llama.cpp's end-of-generation list (tokenizer_json.EOG_TEXTS)")
    s_ids = [i for i in eog if tokens[i] == "</s>"]
    if s_ids and any(tokens[i] in _NORMAL_S_MARKERS for i in eog):
        s_id = max(s_ids)   # llama.cpp walks its ordered EOG set and drops the last '</s>' it saw
        eog.discard(s_id)
        types[s_id] = TOKEN_TYPE_NORMAL
        promoted = [p for p in promoted if not p.startswith(f"{s_id} ")]
        src["eog"] += (f"; without {s_id} '</s>', which is a normal token (1) in a vocabulary with "
                       f"{' or '.join(_NORMAL_S_MARKERS)} (llama.cpp's rule for gemma4 and plamo)")
    return eog, promoted


def _flags(reader: gguf.GGUFReader, model: str, pre: str, src: dict[str, str]) -> tuple[bool, bool, bool]:
    """(add_bos, add_eos, add_space_prefix): the key, else llama.cpp's default, each recorded;
    UnsupportedError for a flag the C tokenizer does not implement."""
    def flag(name: str, key: str, default: bool, why: str) -> bool:
        v = _scalar(reader, key, bool)
        if v is None:
            src[name] = f"default: {key} missing, {default} ({why})"
            return default
        src[name] = key
        return v

    add_bos = flag("add_bos", K.ADD_BOS, model in ("llama", "gemma4") or pre in _ADD_BOS_PRE,
                   "llama.cpp's default for this model / pre-tokenizer")
    if model == "gemma4" and not add_bos:
        add_bos = True   # llama.cpp overrides the key for this model (a workaround it logs)
        src["add_bos"] = f"{K.ADD_BOS} = false overridden to true for tokenizer model 'gemma4', as llama.cpp"
    add_eos = flag("add_eos", K.ADD_EOS, False, "llama.cpp's default")
    add_space_prefix = flag("add_space_prefix", K.ADD_PREFIX, model == "llama", "llama.cpp's default for this model")
    if _scalar(reader, K.REMOVE_EXTRA_WS, bool):
        raise UnsupportedError(f"{K.REMOVE_EXTRA_WS} = true is not supported by the C tokenizer")
    if _scalar(reader, K.ADD_SEP, bool):
        raise UnsupportedError(f"{K.ADD_SEP} = true is not supported by the C tokenizer")
    return add_bos, add_eos, add_space_prefix


def from_gguf(reader: gguf.GGUFReader) -> dict:
    """The tokenizer.json dict of a GGUF file (schema: TOKENIZER_SCHEMA; docs/architecture.md).

    Raises UnsupportedError for a missing tokenizer, a tokenizer model other than ``gpt2`` /
    ``llama`` / ``gemma4`` (MODELS; for the encoder vocabularies the message says why) or a flag
    the C tokenizer does not implement (remove_extra_whitespaces, add_sep), BringupError (exit 2)
    for a key stored with another GGUF type than its own (never converted), and IntegrityError for
    missing keys and ids outside the vocabulary.
    """
    src: dict[str, str] = {}
    model, pre = _tokenizer_model(reader, src)
    tokens, scores, types = _vocabulary(reader, src)
    merges = _merges(reader, model, src)
    special = _special_ids(reader, model, len(tokens), src)
    promoted: list[str] = []
    fim, index = _detected_specials(reader, tokens, types, special, src, promoted)
    eog, promoted = _end_of_generation(tokens, types, special, fim, index, src, promoted)
    if promoted:
        src["token_types"] += ("; promoted to control (3) as llama.cpp does for special texts: "
                               + ", ".join(promoted))
    add_bos, add_eos, add_space_prefix = _flags(reader, model, pre, src)

    chat_template = _scalar(reader, K.CHAT_TEMPLATE, str)
    src["chat_template"] = K.CHAT_TEMPLATE if chat_template is not None else f"absent: {K.CHAT_TEMPLATE} missing"

    tok = {
        "model": model, "pre": pre, "tokens": tokens, "scores": scores, "token_types": types,
        "merges": merges, "special": special, "eog": sorted(eog), "add_bos": add_bos, "add_eos": add_eos,
        "add_space_prefix": add_space_prefix, "chat_template": chat_template, "source_keys": src,
    }
    validate_tokenizer_json(tok)
    return tok
