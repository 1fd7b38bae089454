"""One judging rulebook for the sweep and the replay of a model's calls.

How a case is judged beyond comparing numbers (vectors in canonical form,
indices under ties, writes that land twice, random draws by their
distribution, auxiliary outputs) is written once, keyed by OpInfo names
(`linalg.eigh`, `sort`, `bernoulli`): ambiguity.py, judge.py,
distributions.py, auxiliary.py. A sweep case carries its OpInfo key; a
replayed model call carries only the aten op it dispatched
(`aten::_linalg_eigh`). ATEN_RULES says, per aten op, which OpInfo entry's
rules judge it: the entry whose function reaches that aten op with the same
arguments (input first) and returns the same outputs, so the rule reads the
call as it reads the entry's samples. An aten op with no entry here keeps its
own name: auxiliary outputs are keyed by aten op already.

A replayed call's sample is (anchor, the aten op's arguments, kwargs): the
anchor is a 0-size tensor on the device the call runs on, standing in for
device arguments (DeviceSlot). `judged_as` turns it into the entry's layout.
"""
import torch
from torch.utils._pytree import tree_map

# aten op ("name" for every overload, "name.overload" for one) -> the OpInfo entry judging it.
ATEN_RULES = {
    # Eigen, singular and QR vectors: compared in canonical form and by reconstruction.
    "_linalg_eigh": "linalg.eigh", "linalg_eigh": "linalg.eigh",
    "linalg_eig": "linalg.eig", "linalg_eigvals": "linalg.eigvals",
    "_linalg_svd": "linalg.svd", "linalg_svd": "linalg.svd", "svd": "svd",
    "linalg_qr": "linalg.qr", "qr": "linalg.qr",
    # Indices under ties: checked by the values they point at.
    "sort.default": "sort", "sort.stable": "sort", "topk": "topk", "kthvalue": "kthvalue",
    "max.dim": "max.reduction_with_dim", "min.dim": "min.reduction_with_dim",
    "median.dim": "median", "nanmedian.dim": "nanmedian", "mode": "mode",
    # Writes that land twice (without accumulation): which write wins is unspecified.
    "scatter.src": "scatter", "scatter.value": "scatter",
    "scatter_.src": "scatter", "scatter_.value": "scatter",
    "index_copy": "index_copy", "index_copy_": "index_copy",
    "index_put": "index_put", "index_put_": "index_put", "_index_put_impl_": "index_put",
    "put": "put", "put_": "put",
    # Random draws: judged by their distribution.
    "bernoulli.default": "bernoulli", "bernoulli.p": "bernoulli", "bernoulli_.float": "bernoulli",
    "normal.Tensor_Tensor": "normal", "normal_": "normal.in_place", "uniform_": "uniform",
    "exponential_": "exponential", "geometric_": "geometric", "cauchy_": "cauchy",
    "log_normal_": "log_normal", "multinomial": "multinomial",
    "randn.default": "randn", "rand.default": "rand", "randint.default": "randint", "randint.low": "randint",
    "randn_like": "randn_like", "rand_like": "rand_like", "randperm.default": "randperm",
    "native_dropout": "nn.functional.dropout",
}


def rule_key(op_key):
    """The OpInfo entry whose rules judge `op_key` (an OpInfo key, or an aten op as
    `aten::name.overload`); `op_key` itself where no entry reaches it."""
    if not op_key or not op_key.startswith("aten::"):
        return op_key
    name = op_key[len("aten::"):]
    if "." not in name:
        name += ".default"
    return ATEN_RULES.get(name) or ATEN_RULES.get(name.split(".")[0]) or op_key


class DeviceSlot:
    """A device argument of a replayed call (`device=cpu` of a factory op): filled with where it runs."""

    def __repr__(self):
        return "<device>"


def filled(anchor, tree):
    """`tree` with every DeviceSlot replaced by the anchor's device."""
    return tree_map(lambda x: anchor.device if isinstance(x, DeviceSlot) else x, tree)


def judged_as(op_key, args):
    """(key, (inp, rest, kwargs)): the rule's key and `args` in its entry's layout.

    A sweep case is already in it. A replayed call (an aten key) is
    (anchor, call arguments, kwargs): its first argument becomes the input,
    device slots take the anchor's device.
    """
    key = rule_key(op_key)
    if not op_key or not op_key.startswith("aten::"):
        return key, args
    anchor, rest, kwargs = args
    rest, kwargs = filled(anchor, (tuple(rest), dict(kwargs)))
    if not rest:
        return key, (anchor, (), kwargs)
    return key, (rest[0], rest[1:], kwargs)


def is_replayed(op_key):
    return bool(op_key) and op_key.startswith("aten::")


def anchor_device(args):
    inp = args[0]
    return inp.device if isinstance(inp, torch.Tensor) else None
