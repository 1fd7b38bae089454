"""The OpInfo catalogue: filters, dtypes, seeded samples, graceful failure."""
import builtins

import pytest
import torch

from mpsprobe.ops import opinfo


def test_globs_and_dtypes_filter_pairs():
    pairs = opinfo.list_pairs(["nn.functional.conv*"], ["float32"])
    ops = {p["op"] for p in pairs}
    assert {"nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d"} <= ops
    assert all(p["op"].startswith("nn.functional.conv") and p["dtype"] == "float32" for p in pairs)


def test_variants_are_separate_ops():
    keys = {p["op"] for p in opinfo.list_pairs(["max"], ["float32"])}
    assert any(k.startswith("max.") for k in keys)


def test_every_cpu_dtype_is_tried():
    db = opinfo.load_op_db()
    add = opinfo.find(db, "add")
    expected = {opinfo.dtype_name(d) for d in add.supported_dtypes("cpu")}
    assert {p["dtype"] for p in opinfo.list_pairs(["add"], opinfos=db)} == expected


def test_unknown_names_suggest_close_matches():
    with pytest.raises(opinfo.CatalogueError, match="did you mean"):
        opinfo.list_pairs(["nn.functional.conv22d"])
    with pytest.raises(opinfo.CatalogueError, match="unknown dtype"):
        opinfo.list_pairs(["add"], ["float128"])


def test_samples_are_seeded_per_pair():
    add = opinfo.find(opinfo.load_op_db(), "add")
    first = opinfo.samples(add, torch.float32, 2)
    torch.manual_seed(12345)  # whatever happened before must not matter
    second = opinfo.samples(add, torch.float32, 2)
    assert len(first) == 2
    for a, b in zip(first, second):
        assert torch.equal(a.input, b.input)


def test_nondeterministic_ops_are_recognised():
    for name in ("empty_like", "rand_like", "normal", "bernoulli", "nn.functional.dropout"):
        assert opinfo.is_nondeterministic(name)
    assert not opinfo.is_nondeterministic("add")


def test_missing_expecttest_is_one_clear_error(monkeypatch):
    real_import = builtins.__import__

    def no_expecttest(name, *args, **kwargs):
        if name.startswith("torch.testing._internal.common_methods_invocations"):
            raise ModuleNotFoundError("No module named 'expecttest'", name="expecttest")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_expecttest)
    with pytest.raises(opinfo.CatalogueError, match="pip install expecttest"):
        opinfo.load_op_db()


def test_factory_device_arguments_follow_the_target():
    from mpsprobe.ops.samples import to_device
    moved = to_device((torch.zeros(2), (torch.device("cpu"),), {"device": "cpu"}), "meta")
    assert moved[0].device.type == "meta"
    assert moved[1][0] == torch.device("meta")
    assert moved[2]["device"] == torch.device("meta")
