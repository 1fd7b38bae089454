"""Declarations per release: ops a release lacks, Python-registered kernels, `--versions`.

Tiny fake wheels (zip files with METADATA, a native_functions.yaml, a
common_mps.py and a few Python files) stand for releases; a small list of
OpInfo-shaped stubs stands for the OpInfo list, so no test loads op_db or
touches the network: downloads go through an injected fake downloader.
"""
import json
import os
import sqlite3
import textwrap
import zipfile

import pytest
import torch
from click.testing import CliRunner

import mpsprobe
from mpsprobe.cli import cli
from mpsprobe.ops import opinfo
from mpsprobe.ops.declared import history, presence, python_kernels, reading, wheel
from mpsprobe.vocabulary import PASS, UNSUPPORTED

YAML = textwrap.dedent("""
    - func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
      structured_delegate: add.out
    - func: add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)
      dispatch:
        CPU, CUDA, MPS: add_out
    - func: native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)
      dispatch:
        CPU, CUDA: native_group_norm
        CompositeExplicitAutograd: math_group_norm
    - func: linalg_lu_solve.out(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False, Tensor(a!) out) -> Tensor(a!)
      dispatch:
        CPU, CUDA: linalg_lu_solve_out
""")

COMMON_MPS = textwrap.dedent("""
    import unittest
    import torch

    def mps_ops_modifier(ops):
        UNIMPLEMENTED_XFAILLIST = {"hash_tensor": [torch.int8]}
        for op in ops:
            key = op.name + op.variant_test_name
            if key in UNIMPLEMENTED_XFAILLIST:
                op.decorators += (DecorateInfo(unittest.expectedFailure,
                                               dtypes=UNIMPLEMENTED_XFAILLIST[key]),)
            yield op
""")

BACKENDS_MPS = textwrap.dedent("""
    from torch.library import Library as _Library
    _lib = None

    def _init():
        global _lib
        _lib = _Library("aten", "IMPL")
        _lib.impl("native_group_norm", native_group_norm, "MPS")
        _lib.impl("add.out", something, "CPU")          # not MPS: not counted
        _lib.impl("mul.out", something, KEY)            # not a literal: not counted
""")

REFS_LINALG = textwrap.dedent("""
    import torch
    mps_lib = torch.library.Library("aten", "IMPL", "MPS")
    mps_lib.impl("aten::linalg_lu_solve.out", linalg_lu_solve_out_mps)
""")


def make_wheel(folder, version, yaml=YAML, python=None, common_mps=COMMON_MPS):
    """A torch wheel holding only what the declarations read."""
    path = os.path.join(folder, f"torch-{version}-cp311-none-macosx_11_0_arm64.whl")
    python = {"torch/backends/mps/__init__.py": BACKENDS_MPS,
              "torch/_refs/linalg/__init__.py": REFS_LINALG,
              "torch/nn/functional.py": "def relu(input):\n    return input\n",
              "torch/functional.py": "def stft():\n    pass\n"} if python is None else python
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"torch-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n\n")
        z.writestr(wheel.NATIVE_FUNCTIONS, yaml)
        if common_mps:
            z.writestr(wheel.COMMON_MPS, common_mps)
        for member, text in python.items():
            z.writestr(member, text)
    return path


class Op:
    """The part of an OpInfo the declarations use."""

    def __init__(self, name, aten_name=None, dtypes=(torch.float32, torch.int8)):
        self.name, self.variant_test_name = name, ""
        self.aten_name = aten_name or name
        self._dtypes = set(dtypes)

    def supported_dtypes(self, device):
        return self._dtypes


OPS = [Op("add"), Op("hash_tensor"),
       Op("nn.functional.relu", "relu"),
       Op("nn.functional.linear_cross_entropy", "nn.functional.linear_cross_entropy"),
       Op("made_up_python_op", "made.up")]


@pytest.fixture
def stub_opinfos(monkeypatch):
    monkeypatch.setattr(opinfo, "load_op_db", lambda: OPS)
    return OPS


def rows_of(db, sql, args=()):
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, args)]
    finally:
        conn.close()


def test_ops_a_release_lacks_are_declared_absent_never_pass(tmp_path, stub_opinfos):
    path = make_wheel(tmp_path, "2.8.0")
    summary = mpsprobe.record_declared(tmp_path / "d.db", wheels=[path], opinfos=OPS)
    assert all(item["ok"] for item in summary)
    rows = {(r["op_id"], r["dtype"]): r for r in rows_of(
        tmp_path / "d.db", "SELECT * FROM declared WHERE torch_version = '2.8.0'")}
    # hash_tensor is an aten function of the installed torch, and not in this yaml;
    # linear_cross_entropy is not in this release's torch/nn/functional.py.
    for op, source in (("hash_tensor", "native_functions.yaml"),
                       ("nn.functional.linear_cross_entropy", "torch/nn/functional.py")):
        for dtype in ("float32", "int8"):
            row = rows[(op, dtype)]
            assert row["status"] == UNSUPPORTED and row["source"] == source, row
            assert row["note"].startswith(presence.ABSENT) and "2.8.0" in row["note"]
    # Present ops keep their declarations; so does an op its Python module defines
    # (relu: not in this yaml, but in torch/nn/functional.py), and an op we cannot map.
    assert rows[("add", "float32")]["status"] == PASS
    assert rows[("nn.functional.relu", "float32")]["status"] == PASS
    assert rows[("made_up_python_op", "float32")]["status"] == PASS
    assert not [r for r in rows.values()
                if r["note"].startswith(presence.ABSENT) and r["status"] == PASS]
    assert {item["source"]: item.get("absent_ops") for item in summary} == {
        "native_functions.yaml": None, "common_mps.py": 2}


def test_the_same_ops_are_present_in_a_release_that_has_them(tmp_path, stub_opinfos):
    yaml = YAML + "- func: hash_tensor(Tensor self) -> Tensor\n  dispatch:\n    CPU, MPS: hash\n"
    python = {"torch/nn/functional.py": "def relu(): pass\ndef linear_cross_entropy(): pass\n",
              "torch/functional.py": ""}
    path = make_wheel(tmp_path, "2.13.0", yaml=yaml, python=python)
    mpsprobe.record_declared(tmp_path / "d.db", wheels=[path], opinfos=OPS)
    rows = rows_of(tmp_path / "d.db", "SELECT op_id, dtype, status, note FROM declared")
    assert not [r for r in rows if r["note"].startswith(presence.ABSENT)]
    by = {(r["op_id"], r["dtype"]): r["status"] for r in rows}
    assert by[("hash_tensor", "float32")] == PASS and by[("hash_tensor", "int8")] == UNSUPPORTED


def test_python_registered_mps_kernels_count(tmp_path, stub_opinfos):
    assert python_kernels.registrations(BACKENDS_MPS, "x.py") == [("native_group_norm", 8)]
    path = make_wheel(tmp_path, "2.8.0")
    summary = mpsprobe.record_declared(tmp_path / "d.db", wheels=[path], opinfos=OPS)
    kernels = {r["aten_name"]: r for r in rows_of(tmp_path / "d.db", "SELECT * FROM declared_kernels")}
    for name, where in (("native_group_norm", "torch/backends/mps/__init__.py:8"),
                        ("linalg_lu_solve.out", "torch/_refs/linalg/__init__.py:4")):
        assert kernels[name]["has_mps"] == 1
        assert f"MPS (torch.library, {where})" in kernels[name]["dispatch_keys"]
    assert kernels["add.Tensor"]["has_mps"] == 1                  # its delegate's, from the yaml
    assert "torch.library" not in kernels["add.out"]["dispatch_keys"]
    by = {item["source"]: item for item in summary}
    assert by["native_functions.yaml"]["python_mps_kernels"] == ["linalg_lu_solve.out",
                                                                 "native_group_norm"]
    # Without the Python files, the yaml alone has no MPS kernel for them.
    bare = make_wheel(tmp_path, "2.9.0", python={})
    mpsprobe.record_declared(tmp_path / "d.db", wheels=[bare], opinfos=OPS)
    assert rows_of(tmp_path / "d.db", "SELECT has_mps FROM declared_kernels WHERE "
                   "torch_version = '2.9.0' AND aten_name = 'native_group_norm'") == [{"has_mps": 0}]


@pytest.mark.parametrize("spec, want", [
    ("2.0..2.3", [(2, 0, None), (2, 1, None), (2, 2, None), (2, 3, None)]),
    ("2.8", [(2, 8, None)]),
    ("2.8.0, 2.10..2.11,2.8.0", [(2, 8, 0), (2, 10, None), (2, 11, None)]),
])
def test_version_ranges(spec, want):
    assert history.parse_range(spec) == want


@pytest.mark.parametrize("spec, says", [
    ("2.x", "not a torch version"), ("", "not a torch version"), ("2.13..2.0", "backwards"),
    ("1.13..2.1", "one major"), ("2.0.1..2.3", "without patch"), ("2.0...2.3", "not a torch"),
])
def test_malformed_ranges_are_one_line_errors(tmp_path, spec, says):
    result = CliRunner().invoke(cli, ["declared", "--db", str(tmp_path / "d.db"), "--versions", spec])
    assert result.exit_code == 2 and says in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "d.db").exists()


def test_versions_with_other_sources_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(cli, ["declared", "--db", str(tmp_path / "d.db"),
                                      "--versions", "2.8", "--opinfo-cuda"])
    assert result.exit_code == 2 and "--versions reads downloaded wheels only" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "d.db").exists()


def test_latest_patch_of_each_minor():
    available = ["2.1.0", "2.1.2", "2.1.1", "2.2.0", "2.13.0+cpu", "2.13.0", "2.14.0rc1"]
    assert history.resolve(history.parse_range("2.1..2.2,2.13,2.14,2.1.1"), available) == [
        ("2.1", "2.1.2"), ("2.2", "2.2.0"), ("2.13", "2.13.0"), ("2.14", None), ("2.1.1", "2.1.1")]


def test_versions_end_to_end_with_one_release_failing(tmp_path, monkeypatch, stub_opinfos):
    """`declared --versions` downloads (fake), caches and records each release; one fails cleanly."""
    downloads = []

    def fake_download(version, dest):
        downloads.append(version)
        if version == "2.9.1":
            raise OSError("connection reset")
        old = version.startswith("2.7")
        return make_wheel(dest, version, common_mps=None if old else COMMON_MPS)

    monkeypatch.setattr(history, "pip_versions", lambda: ["2.7.0", "2.7.1", "2.8.0", "2.9.1"])
    monkeypatch.setattr(history, "pip_download", fake_download)
    cache, db = tmp_path / "cache", tmp_path / "h.db"
    monkeypatch.setenv(history.CACHE_ENV, str(cache))
    result = CliRunner().invoke(cli, ["declared", "--db", str(db), "--versions", "2.7..2.9"])
    assert result.exit_code == 0, result.output
    assert downloads == ["2.7.1", "2.8.0", "2.9.1"]
    assert "2.9    torch 2.9.1    FAILED: torch 2.9.1: OSError: connection reset" in result.output
    assert "recorded 2 of 3 releases" in result.output
    # Nothing of the failed release: no rows, no source line, no file left in the cache.
    sources = rows_of(db, "SELECT torch_version, source, ok FROM declared_sources")
    assert {(s["torch_version"], s["source"], s["ok"]) for s in sources} == {
        ("2.7.1", "native_functions.yaml", 1), ("2.7.1", "common_mps.py", 0),
        ("2.8.0", "native_functions.yaml", 1), ("2.8.0", "common_mps.py", 1)}
    assert sorted(os.listdir(cache)) == ["torch-2.7.1-cp311-none-macosx_11_0_arm64.whl",
                                         "torch-2.8.0-cp311-none-macosx_11_0_arm64.whl"]
    counts = {r["torch_version"]: r["n"] for r in rows_of(
        db, "SELECT torch_version, count(*) AS n FROM declared GROUP BY 1")}
    assert counts == {"2.8.0": sum(len(o.supported_dtypes("cpu")) for o in OPS)}
    # A second run reads the cache (no download) and reports per release as JSON.
    downloads.clear()
    result = CliRunner().invoke(cli, ["declared", "--db", str(db), "--versions", "2.8", "--json"])
    assert result.exit_code == 0 and downloads == []
    releases = json.loads(result.stdout)["releases"]
    assert [(r["torch_version"], r["ok"]) for r in releases] == [("2.8.0", True)]
    assert releases[0]["rows"] == sum(r["rows"] for r in releases[0]["readings"])


def test_every_release_failing_is_an_error_and_writes_nothing(tmp_path, monkeypatch, stub_opinfos):
    def offline(version, dest):
        raise history.DownloadError(f"torch {version}: PyPI cannot be reached (offline?)")

    def unlisted():
        raise history.DownloadError("could not list torch versions (offline?)")

    monkeypatch.setattr(history, "pip_versions", unlisted)
    results = []
    with pytest.raises(reading.DeclaredError):
        mpsprobe.record_declared_history(tmp_path / "h.db", "2.0..2.1", tmp_path / "cache",
                                         downloader=offline, on_version=results.append)
    assert [(r["asked"], r["error"]) for r in results] == [
        ("2.0", "could not list torch versions (offline?)"),
        ("2.1", "could not list torch versions (offline?)")]
    assert not (tmp_path / "h.db").exists()
    # Offline, a cached wheel still counts.
    os.makedirs(tmp_path / "cache")
    make_wheel(tmp_path / "cache", "2.1.2")
    done = mpsprobe.record_declared_history(tmp_path / "h.db", "2.0..2.1", tmp_path / "cache",
                                            downloader=offline)
    assert [(r["asked"], r["torch_version"], r["ok"]) for r in done] == [
        ("2.0", None, False), ("2.1", "2.1.2", True)]
