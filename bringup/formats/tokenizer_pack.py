"""Pack tokenizer.json into the binary blob the C tokenizer (csrc/tokenizer) reads.

The blob layout is specified in docs/tokenizer.md ("Blob format"); all integers little-endian:

    header (80 bytes)
      0  char[8]  magic "BUTOKEN1"
      8  u32      version = 1
     12  u32      header size = 80
     16  u64      total blob size in bytes
     24  u32      model: 1 = gpt2 (byte-level BPE), 2 = llama (SentencePiece-style BPE),
                  3 = gemma4 (BPE over raw UTF-8, U+2581 for space, <0xXX> byte fallback)
     28  u32      pre-tokenizer id (PRE_TOKENIZERS)
     32  u32      n_vocab
     36  u32      n_merges
     40  u32      flags: bit 0 add_bos, bit 1 add_eos, bit 2 add_space_prefix
     44  i32[6]   special ids bos, eos, unk, pad, eot, eom (-1 = none)
     68  u32      n_eog
     72  u8[8]    reserved, zero
    vocabulary: n_vocab entries  {u32 len; f32 score; i32 token_type; u8 text[len]}
    merges:     n_merges entries {u32 left_len; u8 left[left_len]; u32 right_len; u8 right[right_len]}
    eog:        n_eog × i32, the end-of-generation token ids, ascending

This module also generates the C Unicode property table (csrc/tokenizer/bu_unicode_tables.c) from
Python's unicodedata: ``python -m bringup.formats.tokenizer_pack --write-unicode-tables``.
"""
from __future__ import annotations

import math
import re
import struct
import sys
import unicodedata

from bringup.core.atomic import write_text
from bringup.core.errors import BringupError, IntegrityError, UnsupportedError
from bringup.formats.tokenizer_json import validate_tokenizer_json
from bringup.core.paths import CSRC
from bringup.core.subcommands import Parser

MAGIC = b"BUTOKEN1"
VERSION = 1
HEADER_BYTES = 80

MODELS = {"gpt2": 1, "llama": 2, "gemma4": 3}

#: tokenizer.ggml.pre name -> the C side's BU_TOK_PRE_* id (csrc/include/bu_tokenizer.h; a test
#: checks both sides agree through bu_tok_pre_name). Aliases are llama.cpp's (llama-vocab.cpp).
PRE_TOKENIZERS = {
    "default": 0,
    "gpt-2": 1, "mpt": 1,
    "llama-bpe": 2, "llama3": 2, "llama-v3": 2,
    "qwen2": 3,
    "smollm": 4,
    "starcoder": 5, "command-r": 5,
    "refact": 6,
    "falcon": 7,
    "deepseek-llm": 8,
    "deepseek-coder": 9,
    "qwen35": 10,
    "gemma4": 11,
}

TOKEN_TYPES = range(0, 7)   # GGUF llama_token_type: 0 undefined .. 6 byte
SPECIAL_ORDER = ("bos", "eos", "unk", "pad", "eot", "eom")

UNICODE_TABLES_PATH = CSRC / "tokenizer" / "bu_unicode_tables.c"


def _pre_id(model: str, pre: str) -> int:
    if model == "llama":
        # SentencePiece-style vocabularies have no pre-tokenizer; llama.cpp ignores the key there.
        if pre != "default":
            raise UnsupportedError(f"tokenizer: model 'llama' with pre-tokenizer {pre!r}; only 'default' is supported")
        return 0
    if model == "gemma4":
        # llama.cpp sets the pre-tokenizer of this model to 'gemma4' whatever the key says
        # (tokenizer_json.from_gguf records that); anything else would be a hand-edited file.
        if pre != "gemma4":
            raise UnsupportedError(f"tokenizer: model 'gemma4' with pre-tokenizer {pre!r}; only 'gemma4' is supported")
        return PRE_TOKENIZERS[pre]
    if pre not in PRE_TOKENIZERS or pre == "gemma4":
        supported = sorted(k for k in PRE_TOKENIZERS if k != "gemma4")
        raise UnsupportedError(f"tokenizer: pre-tokenizer {pre!r} is not supported by the C tokenizer "
                               f"(supported for gpt2: {', '.join(supported)})")
    return PRE_TOKENIZERS[pre]


def split_merge(merge: str, index: int) -> tuple[bytes, bytes]:
    """Split a GGUF merge rule ``"left right"`` at the first space after the first character.

    That is llama.cpp's rule (llama-vocab.cpp: ``word.find(' ', 1)``), so a left part may itself be
    a single space. Raises IntegrityError for a rule without such a space.
    """
    pos = merge.find(" ", 1)
    if pos < 0 or pos == len(merge) - 1:
        raise IntegrityError(f"tokenizer: merge rule {index} {merge!r} is not of the form 'left right'")
    return merge[:pos].encode("utf-8"), merge[pos + 1:].encode("utf-8")


#: the code points of GPT-2's byte-level alphabet (``bytes_to_unicode`` of GPT-2's encoder.py,
#: csrc/tokenizer/bu_tok_unicode.c tok_gpt2_cp_to_byte): printable bytes stand for themselves,
#: the other 68 bytes for U+0100 .. U+0143 in byte order
_PRINTABLE = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
GPT2_ALPHABET = frozenset(map(chr, _PRINTABLE + list(range(0x100, 0x100 + 256 - len(_PRINTABLE)))))
_BYTE_TOKEN = re.compile(r"<0x[0-9A-F]{2}>")
_NORMAL, _BYTE = 1, 6


def undecodable(tok: dict) -> list[tuple[int, str]]:
    """(token id, why) of every token of tokenizer.json dict ``tok`` that the C tokenizer could
    not decode (``bu_tok_decode``, docs/tokenizer.md "Decoding"): an empty text, a NUL, a byte
    token (type 6) not of the form ``<0xXX>``, or for a gpt2 (byte-level) model a normal token
    with a character outside GPT-2's byte alphabet (``GPT2_ALPHABET``). Ascending ids."""
    bad = []
    gpt2 = tok["model"] == "gpt2"
    for i, (text, ttype) in enumerate(zip(tok["tokens"], tok["token_types"])):
        if not text:
            bad.append((i, "its text is empty"))
        elif "\0" in text:
            bad.append((i, "its text holds a NUL"))
        elif ttype == _BYTE and not _BYTE_TOKEN.fullmatch(text):
            bad.append((i, "it is a byte token (type 6) not of the form <0xXX>"))
        elif gpt2 and ttype == _NORMAL:
            ch = next((c for c in text if c not in GPT2_ALPHABET), None)
            if ch is not None:
                bad.append((i, f"U+{ord(ch):04X} is not in GPT-2's byte-level alphabet"))
    return bad


def check_decodable(tok: dict) -> None:
    """Raise IntegrityError (exit 3) naming the first token ``undecodable`` finds, and how many
    there are; every token is checked, so a bad one is found at convert, not by a user's prompt."""
    bad = undecodable(tok)
    if bad:
        i, why = bad[0]
        raise IntegrityError(f"tokenizer: token {i} cannot be decoded by the C tokenizer: {why} "
                             f"({len(bad)} such token{'s' if len(bad) > 1 else ''} in tokenizer.ggml.tokens)")


def pack(tok: dict) -> bytes:
    """Serialize a tokenizer.json dict (docs/architecture.md) into the C tokenizer's blob.

    Raises UnsupportedError for a model type, pre-tokenizer or flag the C side does not implement,
    and IntegrityError for inconsistent data (lengths, ids out of range, malformed merges,
    non-finite scores). Same dict -> same bytes.
    """
    validate_tokenizer_json(tok)
    model = tok["model"]
    if model not in MODELS:
        raise UnsupportedError(f"tokenizer: model type {model!r} is not supported (supported: {', '.join(MODELS)})")
    pre = _pre_id(model, tok["pre"])
    tokens = tok["tokens"]
    n = len(tokens)
    scores = tok["scores"] if tok["scores"] is not None else [0.0] * n
    types = tok["token_types"]
    if len(scores) != n or len(types) != n:
        raise IntegrityError(f"tokenizer: {n} tokens but {len(scores)} scores and {len(types)} token types")
    merges = tok["merges"]
    if model != "llama" and merges is None:
        raise IntegrityError(f"tokenizer: a {model} (BPE) model needs merges")
    if model == "llama" and merges:
        raise UnsupportedError("tokenizer: merges with a llama (SentencePiece) model are not supported")
    if model != "llama" and tok["add_space_prefix"]:
        # llama.cpp ignores the flag for BPE vocabularies; refusing is better than ignoring it.
        raise UnsupportedError(f"tokenizer: add_space_prefix with a {model} (BPE) model is not supported")
    special = []
    for name in SPECIAL_ORDER:
        sid = tok["special"].get(name)
        if sid is None:
            special.append(-1)
        elif not 0 <= sid < n:
            raise IntegrityError(f"tokenizer: special token {name} = {sid} is outside the vocabulary of {n}")
        else:
            special.append(sid)
    flags = (1 if tok["add_bos"] else 0) | (2 if tok["add_eos"] else 0) | (4 if tok["add_space_prefix"] else 0)
    for name, bit in (("bos", tok["add_bos"]), ("eos", tok["add_eos"])):
        if bit and tok["special"].get(name) is None:
            raise IntegrityError(f"tokenizer: add_{name} is set but there is no {name} token")

    parts = []
    for i, (text, score, ttype) in enumerate(zip(tokens, scores, types)):
        if ttype not in TOKEN_TYPES:
            raise IntegrityError(f"tokenizer: token {i} has unknown type {ttype}")
        if not math.isfinite(score):
            raise IntegrityError(f"tokenizer: token {i} has non-finite score {score}")
        raw = text.encode("utf-8")
        parts.append(struct.pack("<IfI", len(raw), score, ttype))
        parts.append(raw)
    for i, m in enumerate(merges or []):
        left, right = split_merge(m, i)
        parts.append(struct.pack("<I", len(left)) + left + struct.pack("<I", len(right)) + right)
    eog = tok["eog"]
    if eog != sorted(set(eog)) or any(not 0 <= e < n for e in eog):
        raise IntegrityError(f"tokenizer: eog must be ascending distinct ids inside the vocabulary, got {eog[:10]}")
    parts.append(struct.pack(f"<{len(eog)}i", *eog))
    body = b"".join(parts)
    total = HEADER_BYTES + len(body)
    header = MAGIC + struct.pack("<IIQIIIII6iI", VERSION, HEADER_BYTES, total, MODELS[model], pre, n,
                                 len(merges or []), flags, *special, len(eog))
    header += b"\0" * (HEADER_BYTES - len(header))
    assert len(header) == HEADER_BYTES
    return header + body


# --- Unicode property table -----------------------------------------------------------------

# White_Space property (Unicode PropList.txt), the \s of the pre-tokenizer regexes. It is not
# derivable from unicodedata's general category, and it has been stable since Unicode 6.0.
WHITE_SPACE = (list(range(0x09, 0x0E)) + [0x20, 0x85, 0xA0, 0x1680] + list(range(0x2000, 0x200B))
               + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


#: general category (first letter) -> flag, one per code point: L and N for every pre-tokenizer;
#: P and M for those whose regexes name \p{P} / \p{M} (default, falcon, deepseek-coder, qwen35)
_CATEGORY_FLAGS = {"L": 1, "N": 2, "P": 8, "M": 16}


def unicode_flags(cp: int) -> int:
    """Flags of one code point: 1 letter (\\p{L}), 2 number (\\p{N}), 4 white space (\\s),
    8 punctuation (\\p{P}), 16 mark (\\p{M})."""
    cat = unicodedata.category(chr(cp))
    return _CATEGORY_FLAGS.get(cat[0], 0) | (4 if cp in WHITE_SPACE else 0)


def unicode_tables_c() -> str:
    """C source of the range table ``bu_uni_ranges`` (start code point, flags), from unicodedata."""
    ranges = []
    prev = None
    for cp in range(0x110000):
        f = unicode_flags(cp)
        if f != prev:
            ranges.append((cp, f))
            prev = f
    lines = [
        "/* Generated by bringup.formats.tokenizer_pack.unicode_tables_c() from Python's unicodedata",
        f" * (Unicode {unicodedata.unidata_version}). Do not edit; regenerate with",
        " *   python -m bringup.formats.tokenizer_pack --write-unicode-tables",
        " * Each row: first code point of a run, flags of the run (1 letter, 2 number, 4 white space,",
        " * 8 punctuation, 16 mark). */",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        "extern const uint32_t bu_uni_ranges[][2];",
        "extern const size_t bu_uni_n_ranges;",
        "",
        f"const uint32_t bu_uni_ranges[{len(ranges)}][2] = {{",
    ]
    for i in range(0, len(ranges), 6):
        lines.append("    " + " ".join(f"{{0x{c:06X}, {f}}}," for c, f in ranges[i:i + 6]))
    lines += ["};", f"const size_t bu_uni_n_ranges = {len(ranges)};", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m bringup.formats.tokenizer_pack")
    ap.add_argument("--write-unicode-tables", action="store_true",
                    help=f"regenerate {UNICODE_TABLES_PATH.relative_to(CSRC.parent)}")
    args = ap.parse_args(argv)
    if not args.write_unicode_tables:
        ap.print_help()
        return 2
    write_text(UNICODE_TABLES_PATH, unicode_tables_c())
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BringupError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
