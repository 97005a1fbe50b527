"""Multi-file outputs appear as a whole (issue 13, docs/hostile_input.md): codegen's model.c/model.h,
the build's libmodel.so/bringup-run/provenance.json, parity's parity.json and its plot, an X-ray hidden-state dump and an export's
bundle folder + archive are each written into a temporary sibling and swapped in at the end
(bringup.core.atomic.atomic_dir). A failure or an interrupt halfway through (simulated here in
process: a full disk on the second file, a compile error on the second binary, a bad tensor name,
Ctrl-C while the bundle is filled) leaves the previous set byte-identical and no temporary behind;
a run that succeeds replaces the whole set.
"""
from __future__ import annotations

import errno
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

from bringup.build import program
from bringup.codegen import emit
from bringup.core import atomic
from bringup.core.errors import BringupError
from bringup.export import archive
from bringup.parity import run as parity, xray
from tree_snapshot import snapshot
from tests.helpers.pipeline import run_pipeline, write_tiny_gguf


def _previous(folder: Path, names) -> None:
    folder.mkdir(parents=True)
    for n in names:
        (folder / n).write_text(f"previous {n}\n")


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> dict[str, Path]:
    """The tiny model's IR, plan and manifest (convert -> ir -> plan -> codegen, no build)."""
    root = tmp_path_factory.mktemp("tiny")
    return run_pipeline(root, write_tiny_gguf(root / "tiny.gguf"), build_it=False)


def test_codegen_full_disk_on_the_second_file_keeps_the_previous_pair(pipeline, tmp_path, monkeypatch):
    out = tmp_path / "codegen"
    _previous(out, ["model.c", "model.h"])
    before = snapshot(tmp_path)
    real = emit.write_text
    calls = []

    def second_fails(path, text):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text)
    monkeypatch.setattr(emit, "write_text", second_fails)
    with pytest.raises(BringupError) as e:
        emit.write(pipeline["ir"], pipeline["plan"], out, pipeline["manifest"])
    assert e.value.exit_code == 5 and "no space left" in str(e.value).lower()
    assert snapshot(tmp_path) == before
    monkeypatch.setattr(emit, "write_text", real)
    emit.write(pipeline["ir"], pipeline["plan"], out, pipeline["manifest"])
    assert snapshot(out) == snapshot(pipeline["codegen"])


def test_codegen_refuses_a_folder_with_other_files(pipeline, tmp_path):
    _previous(tmp_path / "codegen", ["model.c", "notes.txt"])
    before = snapshot(tmp_path)
    with pytest.raises(BringupError, match=r"holds files this stage does not write \(notes.txt\)"):
        emit.write(pipeline["ir"], pipeline["plan"], tmp_path / "codegen", pipeline["manifest"])
    assert snapshot(tmp_path) == before


def _fake_gcc(fail_on: int | None):
    """A stand-in for bringup.build.compiler.gcc: writes ``out`` (the real one takes ~20 s), and
    fails like a compile error on call ``fail_on``."""
    calls = []

    def gcc(sources, out, *a, **kw):
        calls.append(out)
        if len(calls) == fail_on:
            raise BringupError(f"gcc failed building {Path(out).name} (exit 1):\nerror: simulated")
        Path(out).write_bytes(b"\x7fELF new " + Path(out).name.encode())
        return ["gcc", "-o", Path(out).name]
    return gcc


def test_build_failing_on_the_second_binary_keeps_the_previous_set(pipeline, tmp_path, monkeypatch):
    out = tmp_path / "build"
    _previous(out, program.BUILD_FILES)
    before = snapshot(tmp_path)
    monkeypatch.setattr(program.cc_driver, "gcc", _fake_gcc(fail_on=2))
    with pytest.raises(BringupError, match="gcc failed building bringup-run"):
        program.build(pipeline["codegen"], out)
    assert snapshot(tmp_path) == before
    monkeypatch.setattr(program.cc_driver, "gcc", _fake_gcc(fail_on=None))
    prov = program.build(pipeline["codegen"], out)
    assert sorted(os.listdir(tmp_path)) == ["build"] and sorted(os.listdir(out)) == sorted(program.BUILD_FILES)
    assert (out / "bringup-run").read_bytes() == b"\x7fELF new bringup-run"
    # the temporary folder the binaries were built in is named $OUT in provenance, as the folder itself was
    assert prov["commands"]["libmodel.so"] == ["gcc", "-o", "libmodel.so"]


def test_xray_dump_with_a_bad_name_halfway_keeps_the_previous_dump(tmp_path):
    d = tmp_path / "dump"
    xray.write_dump(d, {"header.embed": np.ones((2, 4), np.float32), "layer.0.attn_norm": np.zeros((2, 4))})
    before = snapshot(tmp_path)
    with pytest.raises(BringupError, match="not a checkpoint name"):
        xray.write_dump(d, {"header.embed": np.full((3, 4), 7.0), "weights": np.zeros((3, 4))})
    assert snapshot(tmp_path) == before
    xray.write_dump(d, {"layer.1.ffn_down": np.full((3, 4), 7.0)})
    assert sorted(os.listdir(d)) == ["layer.1.ffn_down.f32", "manifest.json"]    # the old checkpoints went with it
    assert xray.load_dump(d)["layer.1.ffn_down"].shape == (3, 4)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))])
def test_parity_failing_after_its_plot_keeps_the_previous_json_and_plot(tmp_path, monkeypatch, exc):
    out = tmp_path / "parity"
    arrays = {"p0": {"kl": np.array([1e-6, 2e-6, 5e-7]), "top1_match": np.array([True, False, True])}}
    parity.write_outputs(out, {"verdict": "pass", "n": 1}, arrays)
    before = snapshot(tmp_path)

    def json_fails(path, doc):
        raise exc
    monkeypatch.setattr(parity.canonjson, "write", json_fails)
    # a full disk is the user's trouble: one line, exit 5 (bringup.core.errors); Ctrl-C stays itself
    with pytest.raises(BringupError if isinstance(exc, OSError) else KeyboardInterrupt) as e:
        parity.write_outputs(out, {"verdict": "fail", "n": 2}, {"p0": {**arrays["p0"], "kl": np.array([0.5, 0.1, 0.2])}})
    assert not isinstance(exc, OSError) or e.value.exit_code == 5
    assert snapshot(tmp_path) == before       # the old plot too, though the new one was written
    monkeypatch.undo()
    parity.write_outputs(out, {"verdict": "fail", "n": 2}, arrays)
    assert sorted(os.listdir(out)) == [parity.PARITY, parity.PLOT] and '"n": 2' in (out / parity.PARITY).read_text()


def _fill(files: dict[str, str], fail_after: int | None = None, exc: BaseException | None = None):
    def fill(stage: Path) -> None:
        for i, (name, text) in enumerate(files.items()):
            if i == fail_after:
                raise exc
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            (stage / name).write_text(text)
    return fill


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), BringupError("export: a file differs")])
def test_export_failing_halfway_keeps_the_previous_folder_and_archive(tmp_path, exc):
    final, tar = tmp_path / "m-x86-64-v3", tmp_path / "m-x86-64-v3.tar.gz"
    old = {"bundle.json": "{}", "bringup-run": "old", "parity/kl.png": "old plot"}
    archive.write_folder_and_archive(final, tar, set(), _fill(old))
    with tarfile.open(tar) as t:
        assert sorted(t.getnames()) == ["m-x86-64-v3", *sorted(f"m-x86-64-v3/{n}" for n in
                                                              ["bundle.json", "bringup-run", "parity", "parity/kl.png"])]
    before = snapshot(tmp_path)
    new = {"bundle.json": "{}", "bringup-run": "new", "SHA256SUMS": "x"}
    with pytest.raises(type(exc)):
        archive.write_folder_and_archive(final, tar, {"bundle.json", "bringup-run", "parity"}, _fill(new, 2, exc))
    assert snapshot(tmp_path) == before
    archive.write_folder_and_archive(final, tar, {"bundle.json", "bringup-run", "parity"}, _fill(new))
    assert sorted(os.listdir(final)) == sorted(new) and sorted(os.listdir(tmp_path)) == [final.name, tar.name]
    with tarfile.open(tar) as t:
        assert t.extractfile("m-x86-64-v3/bringup-run").read() == b"new"


def test_export_refuses_a_symlink_in_the_bundle_and_keeps_the_previous_pair(tmp_path):
    final, tar = tmp_path / "b", tmp_path / "b.tar.gz"
    archive.write_folder_and_archive(final, tar, set(), _fill({"bundle.json": "{}"}))
    before = snapshot(tmp_path)

    def with_link(stage: Path) -> None:
        (stage / "bundle.json").write_text("{}")
        (stage / "evil").symlink_to("/etc/passwd")
    with pytest.raises(BringupError, match="not a regular file or folder"):
        archive.write_folder_and_archive(final, tar, {"bundle.json"}, with_link)
    assert snapshot(tmp_path) == before


def test_leftover_temporaries_of_a_killed_writer_do_not_block_the_next_set(tmp_path):
    """A writer killed mid-file leaves a hidden temporary named after its output (atomic_open's
    `.<file>.tmp-<tag>`, the compiler driver's `.<file>.<random>.tmp`): the next set replaces the
    folder, temporaries included; a hidden file named after nothing the stage writes is refused."""
    out = tmp_path / "build"
    out.mkdir()
    (out / "libmodel.so").write_bytes(b"old")
    (out / ".libmodel.so.er993s6e.tmp").write_bytes(b"half")
    (out / ".bringup-run.tmp-host-123-abc").write_bytes(b"half")
    with atomic.atomic_dir(out, ("libmodel.so", "bringup-run")) as tmp:
        (tmp / "libmodel.so").write_bytes(b"new")
    assert sorted(p.name for p in out.iterdir()) == ["libmodel.so"]
    (out / ".notes.tmp").write_bytes(b"someone else's")
    with pytest.raises(BringupError, match="holds files this stage does not write"):
        with atomic.atomic_dir(out, ("libmodel.so", "bringup-run")):
            pass
    assert (out / "libmodel.so").read_bytes() == b"new"
