"""Reading what PyTorch declares: native_functions.yaml, common_mps.py, wheels.

Counts are checked against an independent reading of the same files: a plain
line scan here, against the parsers (yaml, ast) under test.
"""
import importlib.util
import json
import os
import re
import sqlite3
import textwrap
import zipfile

import pytest
from click.testing import CliRunner

from mpsprobe.cli import cli
from mpsprobe.ops.declared import common_mps, native_functions, predict as declared, wheel
from mpsprobe.ops.opinfo import dtype_name, load_op_db, op_key, reference_dtypes


def _package_file(package, member):
    root = os.path.dirname(list(importlib.util.find_spec(package).submodule_search_locations)[0])
    return os.path.join(root, member)


YAML_PATH = _package_file("torchgen", wheel.NATIVE_FUNCTIONS)
COMMON_MPS_PATH = _package_file("torch", wheel.COMMON_MPS)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def opinfos():
    return load_op_db()


# ------------------------------------------------------------ native_functions.yaml

def scan_yaml(text):
    """{aten name: (own dispatch has MPS, structured delegate)} by a line scan."""
    out, current, in_dispatch = {}, None, False
    for line in text.splitlines():
        m = re.match(r"- func: ([\w.]+)\(", line)
        if m:
            current, in_dispatch = m.group(1), False
            out[current] = [False, None]
            continue
        if current is None:
            continue
        if re.match(r"  dispatch:\s*$", line):
            in_dispatch = True
        elif re.match(r"  \S", line):
            in_dispatch = False
            d = re.match(r"  structured_delegate:\s*([\w.]+)", line)
            if d:
                out[current][1] = d.group(1)
        elif in_dispatch and re.match(r"    [\w, ]+:", line):
            keys = [k.strip() for k in line.split(":", 1)[0].split(",")]
            out[current][0] = out[current][0] or "MPS" in keys
    return out


def test_native_functions_counts_match_a_line_scan():
    text = read(YAML_PATH)
    functions = native_functions.parse(text)
    scanned = scan_yaml(text)
    assert len(functions) == len(scanned) == text.count("\n- func:") + text.startswith("- func:")
    own = {name for name, (mps, _) in scanned.items() if mps}
    assert {f["aten_name"] for f in functions if "MPS" in f["dispatch_keys"].split(", ")} == own
    with_delegate = own | {n for n, (_, d) in scanned.items() if d in own}
    assert {f["aten_name"] for f in functions if f["has_mps"]} == with_delegate
    assert len(own) > 500                      # plausibility: MPS has hundreds of kernels
    by_name = {f["aten_name"]: f for f in functions}
    assert by_name["add.Tensor"]["has_mps"] and by_name["add.Tensor"]["structured_delegate"] == "add.out"
    assert by_name["linalg_vecdot"]["composite"] == "implicit" and not by_name["linalg_vecdot"]["has_mps"]


# ------------------------------------------------------------------ common_mps.py

def scan_list(text, name, occurrence=0):
    """The keys of the `occurrence`-th `NAME = {...}` literal, by a line scan."""
    blocks = list(re.finditer(rf"^( +){name}\b[^=\n]*= \{{\n(.*?)^\1\}}", text, re.M | re.S))
    body = blocks[occurrence].group(2)
    return {m.group(1) for m in re.finditer(r'^\s+"([^"]+)"\s*[:,]', body, re.M)}


def test_common_mps_lists_match_a_line_scan():
    text = read(COMMON_MPS_PATH)
    expectations = common_mps.Expectations(text)
    forward = expectations.lists["forward"]
    for name in ("SUPPORTED_COMPLEX_OPS", "UNIMPLEMENTED_XFAILLIST", "UNDEFINED_XFAILLIST",
                 "ON_MPS_XFAILLIST", "EMPTY_OPS_SKIPLIST", "SKIPLIST", "MACOS_BEFORE_14_4_XFAILLIST"):
        assert set(forward[name]) == scan_list(text, name), name
    grad = expectations.lists["grad"]
    assert set(grad["XFAILLIST_GRAD"]) == scan_list(text, "XFAILLIST_GRAD")
    assert set(grad["SKIPLIST_GRAD"]) == scan_list(text, "SKIPLIST_GRAD")
    assert set(grad["ON_MPS_XFAILLIST"]) == scan_list(text, "ON_MPS_XFAILLIST", occurrence=1)
    assert len(forward["UNIMPLEMENTED_XFAILLIST"]) > 50
    assert expectations.unknown == []
    # The macOS-gated list is in effect on an old macOS only.
    assert expectations.list_gates()["MACOS_BEFORE_14_4_XFAILLIST"] == "MACOS_VERSION < 14.4"


def test_declared_rows_cover_every_opinfo_pair(opinfos):
    text = read(COMMON_MPS_PATH)
    expectations = common_mps.Expectations(text)
    rows = declared.mps_rows("x", expectations, opinfos, declared.opinfo_dtypes(opinfos, "mps"))
    pairs = {(op_key(o), dtype_name(d)) for o in opinfos for d in reference_dtypes(o)}
    assert {(r["op_id"], r["dtype"]) for r in rows} == pairs
    by_pair = {(r["op_id"], r["dtype"]): r for r in rows}
    # Every op the scan finds listed as unimplemented for all dtypes is declared so,
    # for each dtype OpInfo declares for MPS.
    unimplemented_all = set(re.findall(r'^\s+"([^"]+)": None,', re.search(
        r"UNIMPLEMENTED_XFAILLIST\b[^=\n]*= \{\n(.*?)^        \}", text, re.M | re.S).group(1), re.M))
    mps = declared.opinfo_dtypes(opinfos, "mps")
    checked = 0
    for o in opinfos:
        key = o.name + o.variant_test_name
        if key in unimplemented_all:
            for d in reference_dtypes(o):
                row = by_pair[(op_key(o), dtype_name(d))]
                if dtype_name(d) in mps[op_key(o)]:
                    checked += 1
                    assert row["status"] in ("unsupported", "skip"), row
    assert checked > 20
    # float64 is never declared to work on MPS.
    assert not [r for r in rows if r["dtype"] == "float64" and r["status"] == "pass"]


OLD_SHAPE = textwrap.dedent('''
    import unittest
    import torch

    def mps_ops_modifier(ops):
        SUPPORTED_COMPLEX_OPS = {"add"}
        AFTER_MACOS_14_0_SUPPORTED_COMPLEX_OPS = {"mul"}
        MACOS_BEFORE_13_3_XFAILLIST = {"cdist": [torch.float32]}
        UNIMPLEMENTED_XFAILLIST = {
            "kthvalue": None,
            "dot": [torch.long] if product_version < 14.0 else [],
            **{"lcm": [torch.half]},
        }
        if product_version < 14.0:
            UNIMPLEMENTED_XFAILLIST.update({"fft.fft": None})
        UNDEFINED_XFAILLIST = {"uniform": [torch.float16, torch.float32]}
        SKIPLIST = {"empty": None}

        for op in ops:
            key = op.name + op.variant_test_name
            if key in SKIPLIST:
                op.decorators += (DecorateInfo(unittest.skip("Skipped!"), dtypes=SKIPLIST[key]),)
            for xfaillist in [UNIMPLEMENTED_XFAILLIST, UNDEFINED_XFAILLIST]:
                if key in xfaillist:
                    op.decorators += (DecorateInfo(unittest.expectedFailure, dtypes=xfaillist[key]),)
            if key in MACOS_BEFORE_13_3_XFAILLIST and (torch.backends.mps.is_macos13_or_newer() and product_version < 13.3):
                op.decorators += (DecorateInfo(unittest.expectedFailure, dtypes=MACOS_BEFORE_13_3_XFAILLIST[key]),)
            if key not in SUPPORTED_COMPLEX_OPS and (key not in AFTER_MACOS_14_0_SUPPORTED_COMPLEX_OPS or product_version < 14.0):
                op.decorators += (DecorateInfo(unittest.expectedFailure, dtypes=[torch.complex64]),)
            yield op
''')


@pytest.mark.parametrize("macos, expect", [
    (13.0, {("dot", "int64"): "UNIMPLEMENTED_XFAILLIST", ("fft.fft", "float32"): "UNIMPLEMENTED_XFAILLIST",
            ("cdist", "float32"): "MACOS_BEFORE_13_3_XFAILLIST",
            ("mul", "complex64"): "not in SUPPORTED_COMPLEX_OPS or AFTER_MACOS_14_0_SUPPORTED_COMPLEX_OPS"}),
    (15.0, {("dot", "int64"): None, ("fft.fft", "float32"): None, ("cdist", "float32"): None,
            ("mul", "complex64"): None}),
])
def test_older_shapes_follow_the_macos_version(macos, expect):
    e = common_mps.Expectations(OLD_SHAPE, macos=macos, filename="test_mps.py")
    for (key, dtype), source in expect.items():
        found = e.predict(key, [dtype])[dtype]
        assert [s for _, s in found] == ([source] if source else []), (key, dtype, found)
    assert e.predict("kthvalue", ["float32"])["float32"] == [("xfail", "UNIMPLEMENTED_XFAILLIST")]
    assert e.predict("lcm", ["float16", "int32"]) == {
        "float16": [("xfail", "UNIMPLEMENTED_XFAILLIST")], "int32": []}
    assert e.predict("empty", ["float32"])["float32"] == [("skip", "SKIPLIST")]
    assert e.predict("add", ["complex64"])["complex64"] == []
    gated = {(name, key): gate for name, key, _, gate in e.entries()}
    assert gated[("MACOS_BEFORE_13_3_XFAILLIST", "cdist")] == \
        "torch.backends.mps.is_macos13_or_newer() and product_version < 13.3"
    assert gated[("UNIMPLEMENTED_XFAILLIST", "dot")] == "value depends on product_version < 14.0"
    assert e.unknown == []


def test_not_a_common_mps_file_fails_clearly():
    with pytest.raises(common_mps.CommonMpsError, match="no mps_ops_modifier"):
        common_mps.Expectations("x = 1\n")
    with pytest.raises(common_mps.CommonMpsError, match="not Python"):
        common_mps.Expectations("def (:\n")


# ------------------------------------------------------------------------ wheels

def make_wheel(path, version, with_common_mps=True):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"torch-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n\n")
        z.write(YAML_PATH, wheel.NATIVE_FUNCTIONS)
        if with_common_mps:
            z.write(COMMON_MPS_PATH, wheel.COMMON_MPS)
    return path


def test_wheel_is_read_without_installing(tmp_path):
    files = wheel.from_wheel(make_wheel(tmp_path / "torch-9.1.0-cp311-none-macosx_11_0_arm64.whl", "9.1.0"))
    assert files.torch_version == "9.1.0"
    assert files.native_functions == read(YAML_PATH) and files.common_mps == read(COMMON_MPS_PATH)


def test_declared_from_wheels_records_by_version_and_fails_one_source(tmp_path):
    db = tmp_path / "d.db"
    good = make_wheel(tmp_path / "torch-9.1.0-py3-none-any.whl", "9.1.0")
    old = make_wheel(tmp_path / "torch-9.0.0-py3-none-any.whl", "9.0.0", with_common_mps=False)
    result = invoke("declared", "--db", db, "--wheel", good, "--wheel", old, "--json")
    assert result.exit_code == 0, result.output
    readings = json.loads(result.output)["readings"]
    by = {(r["torch_version"], r["source"]): r for r in readings}
    assert by[("9.1.0", "common_mps.py")]["ok"] and by[("9.1.0", "native_functions.yaml")]["ok"]
    assert not by[("9.0.0", "common_mps.py")]["ok"]
    assert "has no common_mps.py" in by[("9.0.0", "common_mps.py")]["error"]
    assert by[("9.0.0", "native_functions.yaml")]["ok"]
    conn = sqlite3.connect(db)
    versions = dict(conn.execute("SELECT torch_version, count(*) FROM declared GROUP BY 1"))
    assert set(versions) == {"9.1.0"} and versions["9.1.0"] == by[("9.1.0", "common_mps.py")]["rows"] - \
        conn.execute("SELECT count(*) FROM declared_entries WHERE torch_version = '9.1.0'").fetchone()[0]
    kernels = dict(conn.execute("SELECT torch_version, count(*) FROM declared_kernels GROUP BY 1"))
    assert kernels == {"9.0.0": len(scan_yaml(read(YAML_PATH))), "9.1.0": len(scan_yaml(read(YAML_PATH)))}
    failed = conn.execute("SELECT ok, error FROM declared_sources WHERE torch_version = '9.0.0' "
                          "AND source = 'common_mps.py'").fetchone()
    assert failed[0] == 0 and "test_mps.py" in failed[1]


def test_not_a_wheel_is_a_one_line_error(tmp_path):
    bogus = tmp_path / "torch.whl"
    bogus.write_text("not a zip")
    result = invoke("declared", "--db", tmp_path / "d.db", "--wheel", bogus)
    assert result.exit_code == 2
    assert "is not a wheel" in result.output and "Traceback" not in result.output


def test_installed_and_opinfo_cuda(tmp_path, opinfos):
    db = tmp_path / "d.db"
    result = invoke("declared", "--db", db, "--opinfo-cuda")
    assert result.exit_code == 0, result.output
    conn = sqlite3.connect(db)
    version = wheel.installed().torch_version
    n_pairs = sum(len(reference_dtypes(o)) for o in opinfos)
    assert conn.execute("SELECT count(*) FROM declared WHERE device = 'mps' AND torch_version = ?",
                        [version]).fetchone()[0] == n_pairs
    cuda = dict(((op, dt), st) for op, dt, st in conn.execute(
        "SELECT op_id, dtype, status FROM declared WHERE device = 'cuda'"))
    dot = next(o for o in opinfos if o.name == "dot")
    for d in reference_dtypes(dot):
        want = "pass" if d in dot.supported_dtypes("cuda") else "unsupported"
        assert cuda[("dot", dtype_name(d))] == want
    assert "mps" in result.output and "cuda" in result.output
