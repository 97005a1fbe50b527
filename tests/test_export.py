"""`bringup export` and `bringup verify` on the certified smollm2 program (results/smollm2, read
only: exports go to temporary folders), plus the ISA table and the archive on small inputs."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import openai
import pytest

from bringup.core import canonjson
from bringup.core.errors import BringupError, IntegrityError, UnsupportedError
from bringup.core.hashing import sha256_file
from bringup.core.paths import ROOT
from bringup.core.schemas import validate
from bringup.core import isa
from bringup.export import archive, bundle, signing, verify
from tests.helpers import server as srv
from tests.hostile_bundles import fake_bundle, fake_program, rehash, signer

RES = ROOT / "results" / "smollm2"
CERT = RES / "certify" / "certification.json"
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def _bringup(*args, cwd="/"):
    return subprocess.run([sys.executable, "-m", "bringup", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=900, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})


def _export(out: Path, *extra) -> Path:
    r = _bringup("export", "--model", "smollm2", "--results", RES, "--out-dir", out, *extra, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    (tar,) = out.glob("*.tar.gz")
    assert f"archive sha256 {sha256_file(tar)}" in r.stdout, r.stdout
    return tar


def _not_certified() -> str | None:
    """Why results/smollm2 cannot be exported as it is (None: it can)."""
    if not CERT.is_file():
        return "results/smollm2 has no certification"
    cert = json.loads(CERT.read_text())
    if cert["verdict"] != "pass":
        return "results/smollm2's certification did not pass"
    want = {**cert["provenance"]["build"]["artifacts_sha256"], "weights.bump": cert["provenance"]["bump"]["sha256"]}
    for name, (src, _) in bundle.PROGRAM.items():
        if not (RES / src).is_file() or sha256_file(RES / src) != want[name]:
            return f"results/smollm2/{src} changed since its certification"
    return None


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    """(bundle folder, archive) of an export of results/smollm2, which must hold a passing
    certification of the files now in build/ and convert/. In CI the workflow makes it
    (`snakemake certify`, as conftest's smollm2_build runs `snakemake build`); elsewhere a missing or
    stale one skips these tests with the reason, since other work may be rebuilding results/. In CI
    `snakemake certify` always runs: it is a no-op when up to date, and a certification made by
    older code (code is an input) is made again."""
    why = _not_certified()
    if os.environ.get("CI"):
        r = subprocess.run([SNAKEMAKE, "certify", "--config", "model=smollm2"], capture_output=True, text=True,
                           cwd=ROOT, timeout=5400)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        why = _not_certified()
        assert why is None, why
    if why:
        pytest.skip(f"{why}: run `snakemake certify --config model=smollm2`")
    tar = _export(tmp_path_factory.mktemp("export"))
    return tar.with_name(tar.name.removesuffix(".tar.gz")), tar


def _copy(folder: Path, tmp: Path) -> Path:
    dst = tmp / "moved" / folder.name
    shutil.copytree(folder, dst)
    return dst


def _one_line_error(r, code: int, *words: str) -> str:
    err = r.stderr.strip()
    assert r.returncode == code, (r.returncode, r.stdout[-1000:], err[-1000:])
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


# ---------------------------------------------------------------------------------------------
# the bundle
# ---------------------------------------------------------------------------------------------

def test_bundle_holds_the_program_its_certification_and_a_valid_manifest(exported):
    folder, tar = exported
    m = json.loads((folder / "bundle.json").read_text())
    validate(m, "bundle")
    assert folder.name == m["name"] == "smollm2-x86-64-v2" and tar.name == f"{m['name']}.tar.gz"
    names = {f["path"] for f in m["files"]}
    assert {"bringup-run", "libmodel.so", "weights.bump", "certify/certification.json",
            "certify/certification.html", "README.md", "verify.sh"} <= names
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert on_disk == names | {"bundle.json", "SHA256SUMS"}
    # the files rule export_model declares (no directory() output: no .snakemake_timestamp inside)
    assert on_disk == set(bundle.bundle_files(json.loads(CERT.read_text())["parity"]["plots"]))
    assert m["run"] == {"model_dir_option": m["run"]["model_dir_option"]}  # no command line in a bundle
    for f in m["files"]:
        assert sha256_file(folder / f["path"]) == f["sha256"] and (folder / f["path"]).stat().st_size == f["size"]
    cert = json.loads(CERT.read_text())
    assert m["certification"]["sha256"] == sha256_file(CERT)
    assert m["check"]["expected_tokens"] == cert["standalone"]["run"]["expected_tokens"]
    # memory from the memory model, provenance back to the registry's pinned URI
    mm = json.loads((RES / "plan" / "memory_model_calibrated.json").read_text())
    assert m["memory"]["total_bytes"] == mm["total_bytes"] and m["memory"]["ctx"] == mm["params"]["ctx"]
    reg = (ROOT / "config" / "models.yaml").read_text()
    assert m["provenance"]["registry"]["uris"][0] in reg and m["provenance"]["model"]["sha256_matches_pin"]
    assert set(isa.level_flags("x86-64-v2")) <= set(m["isa"]["features"])
    assert m["libraries"]["needed_sonames"] == ["libc.so.6", "libm.so.6"]
    # the HTML's relative links (the parity plot) resolve inside the bundle
    html = (folder / "certify" / "certification.html").read_text()
    for link in re.findall(r'(?:src|href)="(?!https?:|#|data:)([^"]+)"', html):
        assert (folder / "certify" / link).resolve().is_relative_to(folder.resolve()), link
        assert (folder / "certify" / link).is_file(), link


def test_bundle_names_no_path_of_the_build_machine(exported):
    folder, _ = exported
    for name in ("bringup-run", "libmodel.so"):
        dyn = subprocess.run(["readelf", "-d", str(folder / name)], capture_output=True, text=True, check=True).stdout
        assert re.findall(r"\((?:RPATH|RUNPATH)\).*\[(.*)\]", dyn) == ["$ORIGIN"], dyn
        strings = subprocess.run(["strings", "-n", "4", str(folder / name)], capture_output=True, text=True,
                                 check=True).stdout.split("\n")
        # path-like strings: 2+ components of 2+ characters (not code bytes like "/u/A", not "/reset")
        absolute = {s for s in strings if re.fullmatch(r"(/[\w.+-]{2,}){2,}", s.strip())}
        # the ELF interpreter, the kernel's view of the process (--mlock finds the weights mapping
        # there) and the server's URL paths (--server): no path of the build machine
        urls = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/health", "/chat/completions"}
        assert absolute <= {"/lib64/ld-linux-x86-64.so.2", "/proc/self/maps", *urls}, absolute
        assert not [s for s in strings if str(ROOT) in s or "/tmp/" in s or "/home/" in s]
    for p in folder.rglob("*"):
        if p.is_file():
            assert str(ROOT).encode() not in p.read_bytes(), p


def test_two_exports_are_byte_identical(exported, tmp_path):
    folder, tar = exported
    tar2 = _export(tmp_path)
    assert tar2.read_bytes() == tar.read_bytes()
    with tarfile.open(tar2) as t:
        members = t.getmembers()
    assert [x.name for x in members] == sorted(x.name for x in members)
    assert {(x.mtime, x.uid, x.gid, x.uname, x.gname) for x in members} == {(0, 0, 0, "", "")}


# ---------------------------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------------------------

def test_verify_passes_on_a_moved_bundle_and_on_the_archive(exported, tmp_path):
    folder, tar = exported
    moved = _copy(folder, tmp_path)
    for target in (moved, tar):
        r = _bringup("verify", target, "--json", tmp_path / "rec.json")
        assert r.returncode == 0, r.stderr[-2000:]
        rec = json.loads((tmp_path / "rec.json").read_text())
        run = rec["run"]
        assert run["ok"] and run["env"] == {} and run["generated_tokens"] == run["expected_tokens"]
        assert "libmodel.so" in run["loaded"]["in_folder"] and not run["loaded"]["foreign_libraries"]
        assert any("libc.so" in x for x in run["loaded"]["system_libraries"])
        # isolation: done, or said in the output why not
        assert ("no network" in r.stdout) if run["network"]["isolated"] else ("WITH the host's network" in r.stdout)


def test_a_signed_and_pinned_export_verifies(exported, tmp_path):
    """export --sign-key, then verify the archive pinned by the printed sha256 and by the signature
    (``exported``: a certified smollm2, made by the workflow in CI)."""
    key, allowed = signer(tmp_path)
    tar = _export(tmp_path / "out", "--sign-key", key)
    assert (tar.with_name(tar.name.removesuffix(".tar.gz")) / "bundle.json.sig").is_file()
    r = _bringup("verify", tar, "--expect-sha256", sha256_file(tar), "--allowed-signers", allowed,
                 "--signer-identity", "sender@example")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "pinned: the archive has the expected sha256" in r.stdout and "signed: Good" in r.stdout, r.stdout


def test_verify_sh_passes_without_python(exported, tmp_path):
    moved = _copy(exported[0], tmp_path)
    r = subprocess.run(["/bin/sh", str(moved / "verify.sh")], capture_output=True, text=True, cwd="/",
                       env={"PATH": "/usr/bin:/bin"}, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: the recorded" in r.stdout and "./libmodel.so" in r.stdout


@pytest.mark.parametrize("damage, words", [
    ("tamper", ["libmodel.so", "sha256 differs"]),
    ("truncate", ["weights.bump", "bytes"]),
    ("missing", ["weights.bump missing"]),
    ("extra", ["unexpected file", "notes.txt"]),
])
def test_damaged_bundle_fails_integrity_with_one_line(exported, tmp_path, damage, words):
    b = _copy(exported[0], tmp_path)
    if damage == "tamper":
        data = bytearray((b / "libmodel.so").read_bytes())
        data[len(data) // 2] ^= 1
        (b / "libmodel.so").write_bytes(bytes(data))
    elif damage == "truncate":
        with open(b / "weights.bump", "r+b") as fh:
            fh.truncate(1000)
    elif damage == "missing":
        (b / "weights.bump").unlink()
    else:
        (b / "notes.txt").write_text("hi\n")
    _one_line_error(_bringup("verify", b), 3, *words)
    sh = subprocess.run(["/bin/sh", str(b / "verify.sh")], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert sh.returncode == 3 and len(sh.stderr.strip().splitlines()) == 1, sh.stdout + sh.stderr


def test_bundle_for_a_cpu_feature_the_host_lacks_fails_with_exit_4(exported, tmp_path):
    b = _copy(exported[0], tmp_path)
    # a flag this host lacks (a host with all of these gets one no CPU has: the check is by name)
    absent = next((f for f in ("avx512f", "avx512vl", "amx_tile", "sha_ni", "avx2", "avx512_vp2intersect")
                   if f not in isa.host_flags()), "no_such_cpu_flag")
    # a consistent bundle for another CPU: bundle.json, verify.sh and the sums all say so
    m = json.loads((b / "bundle.json").read_text())
    m["isa"]["features"] = sorted({*m["isa"]["features"], absent})
    sh = b / "verify.sh"
    sh.write_text(sh.read_text().replace("for f in cmov", f"for f in {absent} cmov"))
    m["files"] = [{**f, "size": sh.stat().st_size, "sha256": sha256_file(sh)} if f["path"] == "verify.sh" else f
                  for f in m["files"]]
    canonjson.write(b / "bundle.json", m)
    (b / "SHA256SUMS").write_text(bundle.sha256sums(b, [*(f["path"] for f in m["files"]), "bundle.json"]))
    _one_line_error(_bringup("verify", b), 4, absent)
    r = subprocess.run(["/bin/sh", str(sh)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 4 and absent in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr


def test_a_missing_bundle_is_a_usage_error(tmp_path):
    _one_line_error(_bringup("verify", tmp_path / "nope"), 2, "no such bundle")


# ---------------------------------------------------------------------------------------------
# verify runs nothing a bundle names; a pin or a signature detects a replaced program
# (fake bundles: bringup-run is a script that leaves a sentinel file when anything runs it)
# ---------------------------------------------------------------------------------------------

def test_a_fake_bundle_program_runs_and_leaves_its_sentinel(tmp_path):
    """The control of the tests below: verify of a consistent fake bundle does run its
    bringup-run (which then fails: exit 6), and the sentinel shows it."""
    b = fake_bundle(tmp_path)
    _one_line_error(_bringup("verify", b), 6, "standalone run failed", "exited 1")
    assert (tmp_path / "ran").is_file()


@pytest.mark.parametrize("argv", [
    ["/bin/sh", "-c", "echo pwned >ran"],                              # another program
    ["./bringup-run", "-m", ".", "--json-out", "/tmp/bringup-clobbered"],  # an extra output flag
    ["./bringup-run"],                                                 # even the program itself
])
def test_verify_refuses_a_rewritten_run_argv_before_running_anything(tmp_path, argv):
    b = fake_bundle(tmp_path)
    rehash(b, lambda m: m["run"].__setitem__("argv", argv))  # hashes recomputed: only the schema can tell
    _one_line_error(_bringup("verify", b), 3, "'argv' was unexpected")
    archive.write_tar_gz(b, tmp_path / "b.tar.gz")
    _one_line_error(_bringup("verify", tmp_path / "b.tar.gz"), 3, "'argv' was unexpected")
    assert not (tmp_path / "ran").exists() and not Path("/tmp/bringup-clobbered").exists()


def test_a_pin_or_a_signature_detects_a_replaced_program(tmp_path):
    """A bundle whose bringup-run was replaced and whose hashes were recomputed is internally
    consistent (verify without a pin cannot tell), but neither the sender's sha256 nor their
    signature matches it: refused (exit 3) before it runs."""
    key, allowed = signer(tmp_path)
    b = fake_bundle(tmp_path)
    signing.sign(b, key)
    archive.write_tar_gz(b, tmp_path / "good.tar.gz")
    pins = {"bundle.json": sha256_file(b / "bundle.json"), "archive": sha256_file(tmp_path / "good.tar.gz")}
    sig = ["--allowed-signers", allowed, "--signer-identity", "sender@example"]
    # the genuine bundle passes both pins (then its fake program runs and fails: exit 6)
    r = _bringup("verify", b, "--expect-sha256", pins["bundle.json"], *sig)
    assert r.returncode == 6 and "pinned: bundle.json" in r.stdout and "signed: Good" in r.stdout, r.stdout + r.stderr
    (tmp_path / "ran").unlink()
    # the attack: another program, every inner hash recomputed
    (b / "bringup-run").write_bytes(fake_program(tmp_path / "ran").replace(b"exit 1", b"exit 0"))
    rehash(b)
    assert verify.check_files(b, verify.parse_manifest((b / "bundle.json").read_bytes(), b.name)) > 0
    archive.write_tar_gz(b, tmp_path / "evil.tar.gz")
    for target in (b, tmp_path / "evil.tar.gz"):
        for pin in pins.values():
            _one_line_error(_bringup("verify", target, "--expect-sha256", pin), 3, "not the pinned --expect-sha256")
        _one_line_error(_bringup("verify", target, *sig), 3, "is not a valid bringup-bundle signature")
    assert not (tmp_path / "ran").exists()


def test_verify_without_ssh_keygen_is_exit_5(tmp_path):
    b = fake_bundle(tmp_path)
    r = subprocess.run([sys.executable, "-m", "bringup", "verify", str(b), "--allowed-signers", str(tmp_path / "a"),
                        "--signer-identity", "x"], capture_output=True, text=True, cwd="/", timeout=60,
                       env={"PATH": str(tmp_path / "nothing"), "PYTHONPATH": str(ROOT)})
    _one_line_error(r, 5, "ssh-keygen (OpenSSH, package openssh-client) not found")
    assert not (tmp_path / "ran").exists()
    r = subprocess.run([sys.executable, "-m", "bringup", "export", "--model", "smollm2", "--results", str(tmp_path),
                        "--sign-key", str(tmp_path / "key")], capture_output=True, text=True, cwd="/", timeout=60,
                       env={"PATH": str(tmp_path / "nothing"), "PYTHONPATH": str(ROOT)})
    _one_line_error(r, 5, "ssh-keygen (OpenSSH, package openssh-client) not found")
    r = _bringup("export", "--model", "smollm2", "--results", tmp_path, "--sign-key", tmp_path / "key")
    _one_line_error(r, 2, "no such key file")


# ---------------------------------------------------------------------------------------------
# export refuses what it must not ship
# ---------------------------------------------------------------------------------------------

def _results_view(tmp_path: Path) -> Path:
    """A results folder of links to the real smollm2 files (read only) with a copied certify/; its
    callers request ``exported``, which certifies smollm2 first (in CI) or skips saying why."""
    view = tmp_path / "results" / "smollm2"
    for sub in ("build", "convert", "parity", "plan"):
        (view / sub).mkdir(parents=True)
        for p in (RES / sub).iterdir():
            (view / sub / p.name).symlink_to(p)
    shutil.copytree(RES / "certify", view / "certify")
    return view


def test_export_refuses_a_failed_certification(exported, tmp_path):
    view = _results_view(tmp_path)
    c = json.loads((view / "certify/certification.json").read_text())
    canonjson.write(view / "certify/certification.json", {**c, "verdict": "fail", "failed_gates": ["x"]})
    r = _bringup("export", "--model", "smollm2", "--results", view, "--out-dir", tmp_path / "out", cwd=ROOT)
    _one_line_error(r, 6, "not certified")
    assert not list((tmp_path / "out").glob("*"))


def test_export_refuses_a_binary_changed_since_certification(exported, tmp_path):
    view = _results_view(tmp_path)
    (view / "build/bringup-run").unlink()
    (view / "build/bringup-run").write_bytes((RES / "build/bringup-run").read_bytes() + b"\0")
    r = _bringup("export", "--model", "smollm2", "--results", view, "--out-dir", tmp_path / "out", cwd=ROOT)
    _one_line_error(r, 3, "bringup-run", "differs from the file certified")


def test_export_refuses_a_weights_manifest_of_other_weights(exported, tmp_path):
    view = _results_view(tmp_path)
    wm = view / "convert/weights_manifest.json"
    doc = json.loads(wm.read_text())
    wm.unlink()
    canonjson.write(wm, {**doc, "bump": {**doc["bump"], "payload_sha256": "0" * 64}})
    r = _bringup("export", "--model", "smollm2", "--results", view, "--out-dir", tmp_path / "out", cwd=ROOT)
    _one_line_error(r, 3, "weights_manifest.json", "does not describe the certified weights.bump")


def test_the_bundle_s_chat_loop_names_its_chat_format_s_source(exported):
    # it once said "its source is not recorded here" on every launch: the manifest was left behind
    folder, _ = exported
    m = json.loads((folder / "bundle.json").read_text())
    assert {"path": "weights_manifest.json", "role": "weights-manifest"}.items() <= next(
        f for f in m["files"] if f["path"] == "weights_manifest.json").items()
    argv = ["./bringup-run", "-m", "."] if m["run"]["model_dir_option"] else ["./bringup-run", "./libmodel.so",
                                                                                "./weights.bump"]
    r = subprocess.run([*argv, "-n", "1"], cwd=folder, input=b"/quit\n", capture_output=True, timeout=120)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err[-2000:]
    assert "not recorded" not in err
    assert "chat format 'chatml_smollm2' of circuit llama: chat_template contains" in err


def _first_parity_gate(doc: dict) -> dict:
    return next(g for g in doc["gates"] if isinstance(g.get("measured"), (int, float)))


@pytest.mark.parametrize("edit", ["certification", "parity"])
def test_export_refuses_an_edited_measured_value(exported, tmp_path, edit):
    """A `measured` value edited after certification, in certification.json (certify/PASSED holds
    its sha256) or in parity.json (the certification holds its sha256): exit 3, nothing written."""
    view = _results_view(tmp_path)
    path = view / ("certify/certification.json" if edit == "certification" else "parity/parity.json")
    doc = json.loads(path.read_text())
    _first_parity_gate(doc)["measured"] = 0
    path.unlink()  # parity.json is a link to the real one: replace the link, not the file
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    r = _bringup("export", "--model", "smollm2", "--results", view, "--out-dir", tmp_path / "out", cwd=ROOT)
    _one_line_error(r, 3, "edited" if edit == "certification" else "is not the parity.json the certification names")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_snakemake_export_dry_run():
    r = subprocess.run([SNAKEMAKE, "-n", "export", "--config", "model=smollm2"], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = r.stdout + r.stderr
    assert "smollm2-x86-64-v2.tar.gz" in out or "Nothing to be done" in out


# ---------------------------------------------------------------------------------------------
# ISA and archive units
# ---------------------------------------------------------------------------------------------

def test_isa_requirement_joins_the_build_level_and_the_providers():
    req = isa.requirement("x86_64", ["-march=x86-64-v2"], {"linear.q4_1.avx2": ["avx2"], "add.f32.scalar": []})
    assert req["name"] == "x86-64-v2+avx2" and {"avx", "avx2", "sse4_2", "pni"} <= set(req["features"])
    assert isa.requirement("x86_64", ["-march=x86-64-v3"], {"k": ["avx2"]})["name"] == "x86-64-v3"
    assert isa.name_of(["-march=x86-64-v2"]) == "x86-64-v2"
    with pytest.raises(UnsupportedError, match="no cpuinfo mapping"):
        isa.requirement("x86_64", ["-march=x86-64-v2"], {"k": ["neon"]})
    with pytest.raises(UnsupportedError, match="lacks avx, avx2"):
        isa.check_host(req, have=set(isa.level_flags("x86-64-v2")), machine="x86_64")
    with pytest.raises(UnsupportedError, match="aarch64"):
        isa.check_host(req, have=set(), machine="aarch64")


def test_archive_is_deterministic_and_extraction_is_safe(tmp_path):
    src = tmp_path / "b"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "z.txt").write_text("z")
    (src / "a.bin").write_bytes(b"\0" * 10)
    (src / "a.bin").chmod(0o700)
    archive.write_tar_gz(src, tmp_path / "1.tar.gz")
    (src / "sub" / "z.txt").touch()  # a new mtime changes nothing
    archive.write_tar_gz(src, tmp_path / "2.tar.gz")
    assert (tmp_path / "1.tar.gz").read_bytes() == (tmp_path / "2.tar.gz").read_bytes()
    (tmp_path / "x").mkdir()
    sizes = {"a.bin": 10, "sub/z.txt": 1, "bundle.json": -100}
    with pytest.raises(IntegrityError, match="no bundle.json"):
        archive.extract_bundle(tmp_path / "1.tar.gz", tmp_path / "x", lambda raw: sizes)
    (src / "bundle.json").write_text("{}")
    archive.write_tar_gz(src, tmp_path / "1.tar.gz")
    top = archive.extract_bundle(tmp_path / "1.tar.gz", tmp_path / "x", lambda raw: sizes)
    assert top.name == "b" and (top / "sub" / "z.txt").read_text() == "z"
    with pytest.raises(IntegrityError, match="'a.bin' is 10 bytes, bundle.json says 9"):
        archive.extract_bundle(tmp_path / "1.tar.gz", tmp_path / "x2", lambda raw: {**sizes, "a.bin": 9})
    assert not (tmp_path / "x2").exists()
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as t:
        info = tarfile.TarInfo("b/../../escape")
        info.size = 0
        t.addfile(info)
    with pytest.raises(IntegrityError):
        archive.extract_bundle(evil, tmp_path / "y", lambda raw: sizes)
    (src / "link").symlink_to("a.bin")
    with pytest.raises(BringupError, match="not a regular file"):
        archive.write_tar_gz(src, tmp_path / "3.tar.gz")


def test_the_bundle_serves_over_http(exported, tmp_path):
    """The bundle's own bringup-run serves its model (--server; tests/test_server.py has the rest):
    moved elsewhere, started from its folder, asked through the openai client, stopped by SIGTERM."""
    folder = _copy(exported[0], tmp_path)
    s = srv.start(folder, tmp_path / "log", argv=[str(folder / "bringup-run"), "-m", str(folder), "--server", "--port", "0"])
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        assert [m.id for m in c.models.list()] == [folder.name]
        r = c.chat.completions.create(model=folder.name, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
        assert r.choices[0].message.content
    finally:
        assert s.stop() == 0, s.log_text()
