"""Hostile bundles and archives for ``bringup verify`` (issue 28): cases of the hostile catalogue
(tests/hostile_cases.py adds BUNDLE_CASES to its table), and ``fake_bundle``, a small consistent
bundle that needs no certified model.

A fake bundle's ``bringup-run`` is a shell script that writes ``ran`` beside the bundle and
fails: since the catalogue checks that a case's folder is unchanged, every case below also
proves that verify refused the bundle before running anything.
"""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Callable

from bringup.core import canonjson
from bringup.core.hashing import sha256_file
from bringup.core import isa
from bringup.export import archive, bundle

NAME = "tiny-x86-64-v2"


def fake_program(sentinel: Path) -> bytes:
    """A ``bringup-run`` that leaves ``sentinel`` behind when anything runs it."""
    return f"#!/bin/sh\necho ran >'{sentinel}'\nexit 1\n".encode()


def fake_bundle(parent: Path, program: bytes | None = None, name: str = NAME) -> Path:
    """A consistent bundle folder ``parent/name`` (bundle.json, SHA256SUMS, verify.sh, README.md,
    all as bringup export writes them) around a fake program (default: fake_program of
    ``parent/ran``) and placeholder library and weights."""
    stage = parent / name
    (stage / "certify").mkdir(parents=True)
    (stage / "bringup-run").write_bytes(program if program is not None else fake_program(parent / "ran"))
    (stage / "libmodel.so").write_bytes(b"\x7fELF not really\n")
    (stage / "weights.bump").write_bytes(bytes(range(256)) * 4)
    (stage / "certify" / "certification.json").write_text('{"verdict": "pass"}\n')
    (stage / "certify" / "certification.html").write_text("<html></html>\n")
    zero = "0" * 64
    manifest = {
        "schema_version": 2, "name": name, "model": "tiny",
        "isa": isa.requirement("x86_64", ["-march=x86-64-v2"], {}),
        "memory": {"total_bytes": 1 << 20, "ctx": 64, "seqs": 1, "kv_dtype": "f32", "prefill_chunk": 8,
                   "complete": True, "missing": [], "components": {"weights": 1024},
                   "source": {"path": "plan/memory_model_calibrated.json", "sha256": zero}},
        "provenance": {"model": {"name": "tiny", "architecture": "llama", "uris": ["file://tiny.gguf"], "sha256": zero,
                                 "pinned_sha256": zero, "sha256_matches_pin": True},
                       "registry": {"path": "config/models.yaml", "uris": ["file://tiny.gguf"], "sha256": zero},
                       "chain": {}},
        "certification": {"path": "certify/certification.json", "verdict": "pass",
                          "sha256": sha256_file(stage / "certify" / "certification.json")},
        "run": {"model_dir_option": True},
        "check": {"prompt_tokens": [1, 2, 3], "expected_tokens": [4, 5], "threads": 1, "source": "a test"},
        "libraries": {"needed": {}, "needed_sonames": [], "certified_ldd": {}, "certified_loaded": None},
    }
    roles = {n: r for n, (_, r) in bundle.PROGRAM.items()} | dict(bundle.REPORTS)
    bundle.write_manifest(stage, manifest, roles)
    return stage


def rehash(folder: Path, edit: Callable[[dict], None] | None = None) -> None:
    """Apply ``edit`` to bundle.json, then make the bundle consistent again: every file's size
    and SHA-256 in bundle.json, SHA256SUMS. What a bundle's author can always do."""
    m = canonjson.read(folder / "bundle.json", "bundle.json")
    if edit:
        edit(m)
    m["files"] = [{**f, "size": (folder / f["path"]).stat().st_size, "sha256": sha256_file(folder / f["path"])}
                  for f in m["files"]]
    (folder / "bundle.json").write_text(canonjson.dumps(m))
    (folder / "SHA256SUMS").write_text(bundle.sha256sums(folder, [*(f["path"] for f in m["files"]), "bundle.json"]))


def signer(w: Path) -> tuple[Path, Path]:
    """A fresh ed25519 key ``w/key`` and an allowed-signers file naming it as ``sender@example``."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sender", "-f", str(w / "key")], check=True,
                   stdin=subprocess.DEVNULL, timeout=60)
    (w / "allowed").write_text(f"sender@example {(w / 'key.pub').read_text().split(' ', 2)[0]} "
                               f"{(w / 'key.pub').read_text().split(' ', 2)[1]}\n")
    return w / "key", w / "allowed"


# --- builders: each makes its inputs in ``w`` and returns the ``bringup`` argv -----------------------

def folder(change: Callable[[Path], None], *extra: str, sign: bool = False) -> Callable:
    """``bringup verify`` on a fake bundle in ``w`` after ``change(bundle folder)``."""
    def build(w: Path, b) -> list[str]:
        f = fake_bundle(w)
        args = list(extra)
        if sign:
            key, allowed = signer(w)
            args += ["--allowed-signers", str(allowed), "--signer-identity", "sender@example"]
        change(f)
        return ["verify", str(f), *[a.replace("{w}", str(w)) for a in args]]
    return build


def edited(fn: Callable[[dict], None]) -> Callable[[Path], None]:
    return lambda f: rehash(f, fn)


def _set(path: str, value) -> Callable[[dict], None]:
    def fn(m: dict) -> None:
        *head, last = path.split(".")
        for k in head:
            m = m[k]
        m[last] = value
    return fn


def _swap_program_for_link(f: Path) -> None:
    (f / "bringup-run").unlink()
    (f / "bringup-run").symlink_to("/bin/sh")


def _huge_manifest(f: Path) -> None:
    with open(f / "bundle.json", "ab") as fh:
        fh.write(b" " * (2 << 20))


def _garbage_signature(f: Path) -> None:
    (f / "bundle.json.sig").write_text("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n")


def _path_escape(f: Path) -> None:
    m = canonjson.read(f / "bundle.json", "bundle.json")
    m["files"][0]["path"] = "../../etc/passwd"
    (f / "bundle.json").write_text(canonjson.dumps(m))


def _fifo(f: Path) -> None:
    os.mkfifo(f / "notes")


def tarball(members: Callable[[Path], list[tuple[tarfile.TarInfo, bytes | None]]], fmt=tarfile.USTAR_FORMAT) -> Callable:
    """``bringup verify`` on ``w/b.tar.gz`` holding a good fake bundle's members plus ``members(w)``."""
    def build(w: Path, b) -> list[str]:
        src = fake_bundle(w / "src", fake_program(w / "ran"))
        archive.write_tar_gz(src, w / "good.tar.gz")
        with tarfile.open(w / "good.tar.gz") as good, tarfile.open(w / "b.tar.gz", "w:gz", format=fmt) as out:
            for m in good.getmembers():
                out.addfile(m, good.extractfile(m) if m.isfile() else None)
            for info, data in members(w):
                out.addfile(info, io.BytesIO(data) if data is not None else None)
        shutil.rmtree(w / "src")
        (w / "good.tar.gz").unlink()
        return ["verify", str(w / "b.tar.gz")]
    return build


def member(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, data: bytes | None = None, **kw):
    def make(w: Path):
        info = tarfile.TarInfo(f"{NAME}/{name}" if not name.startswith("/") and not name.startswith("..") else name)
        info.type = kind
        for k, v in kw.items():
            setattr(info, k, v)
        body = data if data is not None else (bytes(size) if kind == tarfile.REGTYPE else None)
        info.size = len(body) if body is not None else 0
        return [(info, body)]
    return make


def many(n: int):
    return lambda w: [x for i in range(n) for x in member(f"f{i}", data=b"")(w)]


def not_gzip(w: Path, b) -> list[str]:
    (w / "b.tar.gz").write_bytes(b"this is not gzip\n" * 10)
    return ["verify", str(w / "b.tar.gz")]


BUNDLE_CASES_SPEC = [
    # (id, rc, pattern, build)
    ("verify-run-argv-shell", 3, r"/run: Additional properties are not allowed \('argv' was unexpected\)",
     folder(edited(_set("run.argv", ["/bin/sh", "-c", "echo pwned > /tmp/pwned"])))),
    ("verify-run-argv-output-flag", 3, r"'argv' was unexpected",
     folder(edited(_set("run.argv", ["./bringup-run", "-m", ".", "--json-out", "/tmp/clobbered"])))),
    ("verify-schema-v1-bundle", 3, r"schema_version: 2 was expected", folder(edited(_set("schema_version", 1)))),
    ("verify-token-float", 3, r"check.prompt_tokens must be integers from 0 to 2147483647",
     folder(edited(_set("check.prompt_tokens", [1.0, 2])))),
    ("verify-token-string-flag", 3, r"prompt_tokens/0: '--output=x' is not of type 'integer'",
     folder(edited(_set("check.prompt_tokens", ["--output=x"])))),
    ("verify-token-negative", 3, r"-5 is less than the minimum of 0", folder(edited(_set("check.expected_tokens", [-5])))),
    ("verify-threads-absurd", 3, r"threads: 100000 is greater than the maximum of 256",
     folder(edited(_set("check.threads", 100000)))),
    ("verify-tokens-beyond-ctx", 3, r"exceed the planned context of 4", folder(edited(_set("memory.ctx", 4)))),
    ("verify-file-path-escape", 3, r"files/0/path: '\.\./\.\./etc/passwd' does not match",
     folder(_path_escape)),
    ("verify-program-symlink", 3, r"bringup-run is a symbolic link", folder(_swap_program_for_link)),
    ("verify-extra-symlink", 3, r"passwd is a symbolic link",
     folder(lambda f: (f / "passwd").symlink_to("/etc/passwd"))),
    ("verify-fifo-in-bundle", 3, r"notes is a FIFO", folder(_fifo)),
    ("verify-extra-file", 3, r"unexpected file notes.txt", folder(lambda f: (f / "notes.txt").write_text("x"))),
    ("verify-extra-folder", 3, r"unexpected folder extra", folder(lambda f: (f / "extra").mkdir())),
    ("verify-newline-file-name", 3, r"unexpected file a\\nverify: OK",
     folder(lambda f: (f / "a\nverify: OK").write_text("x"))),
    ("verify-manifest-over-1mib", 3, r"bundle.json is 2,[\d,]+ bytes; a bundle's is at most 1,048,576", folder(_huge_manifest)),
    ("verify-manifest-not-json", 3, r"bundle.json is not JSON",
     folder(lambda f: (f / "bundle.json").write_text("[" * 100000 + "]" * 100000))),
    ("verify-too-many-entries", 3, r"more than 256 entries; a bundle has about 13",
     folder(lambda f: [(f / "certify" / f"x{i}").mkdir() for i in range(300)])),
    ("verify-wrong-pin", 3, r"not the pinned --expect-sha256 0{64}", folder(lambda f: None, "--expect-sha256", "0" * 64)),
    ("verify-pin-not-hex", 2, r"a SHA-256 is 64 hexadecimal digits", folder(lambda f: None, "--expect-sha256", "abc")),
    ("verify-unsigned-but-signer-named", 3, r"bundle.json.sig missing: the bundle is not signed",
     folder(lambda f: None, sign=True)),
    ("verify-bad-signature", 3, r"not a valid bringup-bundle signature of bundle.json by 'sender@example'",
     folder(_garbage_signature, sign=True)),
    ("verify-signers-without-identity", 2, r"--allowed-signers and --signer-identity go together",
     folder(lambda f: None, "--allowed-signers", "{w}/nope")),
    ("verify-threads-zero", 2, r"0 threads is outside 1\.\.256", folder(lambda f: None, "--threads", "0")),
    ("archive-not-gzip", 3, r"not a readable bundle archive", not_gzip),
    ("archive-bomb", 3, r"more than [\d,]+ bytes unpacked \(16x the archive's", tarball(member("zeros", size=64 << 20))),
    ("archive-symlink-member", 3, r"member 'tiny-x86-64-v2/x' is a symbolic link",
     tarball(member("x", tarfile.SYMTYPE, linkname="/etc/passwd"))),
    ("archive-hardlink-member", 3, r"is a hard link", tarball(member("x", tarfile.LNKTYPE, linkname=f"{NAME}/README.md"))),
    ("archive-device-member", 3, r"is a character device", tarball(member("null", tarfile.CHRTYPE, devmajor=1, devminor=3))),
    ("archive-fifo-member", 3, r"is a FIFO", tarball(member("p", tarfile.FIFOTYPE))),
    ("archive-pax-header", 3, r"is a pax header", tarball(member("x" * 120, data=b"x"), fmt=tarfile.PAX_FORMAT)),
    ("archive-too-many-members", 3, r"more than 256 members", tarball(many(300))),
    ("archive-second-top", 3, r"member 'other/x' is outside its one top folder",
     tarball(lambda w: [(tarfile.TarInfo("other/x"), b"")])),
    ("archive-path-escape", 3, r"is outside its one top folder", tarball(member("../escape", data=b"x"))),
    ("archive-unlisted-member", 3, r"unexpected member 'notes.txt'", tarball(member("notes.txt", data=b"hi"))),
    ("archive-duplicate-member", 3, r"duplicate member 'weights.bump'", tarball(member("weights.bump", data=bytes(1024)))),
]
