"""The ir stage's inputs (config.json, weights_manifest.json) without running convert: from a real
GGUF's header, or built by hand for any family from small hyper-parameters."""
from __future__ import annotations

from bringup.convert import importer as convert
from bringup.convert.manifest import load_tensor_map, map_tensors
from bringup.formats import ggml as formats
from bringup.formats import gguf_file as gguf_read
from bringup.ir import block, circuits

Z64 = "0" * 64


def edit_ops(doc: dict, edit) -> dict:
    """IR ``doc`` (changed in place, and returned) after ``edit(ops)`` changed its expanded op list:
    the ops folded back into header, block and footer (bringup.ir.block.fold, whose refusals
    propagate: a layer can differ from the block only in its binding table)."""
    ops = block.expand(doc)
    edit(ops)
    circuit = circuits.all_circuits(circuits.CIRCUITS)[doc["circuit"]["name"]]   # the one it was lowered from
    names = circuit.data["layer_values"]
    layers = [{"inputs": b["inputs"], "values": {k: v for k, v in b["values"].items() if k in names}}
              for b in doc["block"]["layers"]]
    rest = {k: v for k, v in doc.items() if k not in ("header", "block", "footer")}
    new = block.fold({**rest, "ops": ops}, circuit, layers)
    doc.clear()
    doc.update(new)
    return doc


def model_inputs(gguf_path) -> tuple[dict, dict]:
    """config.json and weights_manifest.json for a real GGUF, from its header only (the convert
    stage's own extract_config / tensor map; the tokenizer and hashing are skipped for speed)."""
    r = gguf_read.open_gguf(gguf_path)   # cached per process: the tests of other stages open it too
    cfg = convert.extract_config(r, Z64)
    tmap = load_tensor_map(cfg["architecture"])
    mapped, excluded, unaccounted = map_tensors([t.name for t in r.tensors], tmap, cfg["hparams"]["n_layer"])
    assert not unaccounted
    rows = []
    for t in r.tensors:
        if t.name in mapped:
            f = formats.by_ggml_type(int(t.tensor_type))
            rows.append({"gguf_name": t.name, "name": mapped[t.name], "dtype": f.name,
                         "shape": [int(d) for d in t.shape], "bytes": int(t.n_bytes)})
    return cfg, _manifest(cfg, rows, excluded)

def _manifest(cfg: dict, rows: list[dict], excluded: dict | None = None) -> dict:
    return {"schema_version": 1, "architecture": cfg["architecture"], "gguf_sha256": Z64,
            "tensor_map": {"file": f"tensor_maps/{cfg['architecture']}.json", "sha256": Z64},
            "tensors": rows,
            "excluded": [{"gguf_name": n, "reason": r} for n, r in sorted((excluded or {}).items())],
            "unaccounted": [], "tied": {"output": "tok_embd"} if cfg["tied_embeddings"] else {},
            "extra": [{"name": "tokenizer.blob", "dtype": "I8", "bytes": 16, "reason": "packed tokenizer"}],
            "counts": {"gguf": len(rows), "mapped": len(rows), "excluded": len(excluded or {}), "unaccounted": 0},
            "weight_bytes": sum(r["bytes"] for r in rows)}

TINY_HP = dict(n_layer=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, head_dim_v=16, n_ff=128,
               n_vocab=96, n_ctx_train=256, rope_theta=1e4, rope_dim=16, norm_eps=1e-5,
               sliding_window=None, attn_logit_softcap=None, final_logit_softcap=None)

# canonical per-layer roles each family's GGUF carries (llama.cpp src/models/<arch>.cpp load_arch_tensors)
ROLES = {
    "llama": ["attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down"],
    "mistral3": ["attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down"],
    "qwen2": ["attn_norm", "wq", "wk", "wv", "bq", "bk", "bv", "wo", "ffn_norm", "w_gate", "w_up", "w_down"],
    "qwen3": ["attn_norm", "wq", "wk", "wv", "q_norm", "k_norm", "wo", "ffn_norm", "w_gate", "w_up", "w_down"],
    "gemma3": ["attn_norm", "wq", "wk", "wv", "q_norm", "k_norm", "wo", "post_attn_norm", "ffn_norm",
               "w_gate", "w_up", "w_down", "post_ffn_norm"],
}

def synth_inputs(arch: str, hp: dict | None = None, tied: bool = True, matrix_dtype: str = "Q8_0",
                 drop: str | None = None, add: str | None = None) -> tuple[dict, dict]:
    """A config and manifest built by hand: GGUF shapes (ne0 first) of each role from the
    hyper-parameters; matrices in ``matrix_dtype``, norms and biases F32."""
    hp = dict(hp or TINY_HP)
    cfg = {"schema_version": 1, "architecture": arch, "name": f"synthetic {arch}", "hparams": hp,
           "sources": {k: "test" for k in hp}, "tied_embeddings": tied, "gguf_sha256": Z64, "tensor_count": 0}
    e, hd, hdv, nh, nkv, ff = hp["n_embd"], hp["head_dim"], hp["head_dim_v"], hp["n_head"], hp["n_head_kv"], hp["n_ff"]
    shapes = {"attn_norm": [e], "ffn_norm": [e], "post_attn_norm": [e], "post_ffn_norm": [e],
              "wq": [e, nh * hd], "wk": [e, nkv * hd], "wv": [e, nkv * hdv], "wo": [nh * hdv, e],
              "bq": [nh * hd], "bk": [nkv * hd], "bv": [nkv * hdv], "q_norm": [hd], "k_norm": [hd],
              "w_gate": [e, ff], "w_up": [e, ff], "w_down": [ff, e]}
    rows = [("tok_embd", [e, hp["n_vocab"]]), ("output_norm", [e])]
    if not tied:
        rows.append(("output", [e, hp["n_vocab"]]))
    for L in range(hp["n_layer"]):
        rows += [(f"layer.{L}.{r}", shapes[r]) for r in ROLES[arch]]
    if add:
        rows.append((add, [e]))
    out = []
    for name, shape in rows:
        if name == drop:
            continue
        dt = matrix_dtype if len(shape) == 2 else "F32"
        out.append({"gguf_name": name, "name": name, "dtype": dt, "shape": shape,
                    "bytes": formats.by_name(dt).tensor_bytes(shape)})
    cfg["tensor_count"] = len(out)
    return cfg, _manifest(cfg, out)
