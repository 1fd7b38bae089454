"""Loading the model to check: a Python file with build(), or a torchvision model by name.

A model file defines

    def build():
        return model, example_inputs            # or (model, example_inputs, loss)

`example_inputs` is a tensor, a tuple/list of positional arguments, or a dict
of keyword arguments; `loss(output)` (optional) turns the output into the
scalar that `--train` differentiates.
"""
import importlib.util
import os
import platform
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from mpsprobe.errors import MpsprobeError
from .isolated import check_spec


MAX_INPUT_ELEMENTS = 1 << 28   # 1 GiB of float32: far beyond an example input


class ModelError(MpsprobeError):
    """The model cannot be loaded or built: one line for the user."""


@dataclass
class LoadedModel:
    name: str
    model: torch.nn.Module
    inputs: Any
    loss: Optional[Callable] = None
    kept: tuple = ()     # tensors `cast` left in float64 on purpose ("buffer scale")


def parse_shape(text):
    """"1,3,224,224" -> (1, 3, 224, 224)."""
    try:
        shape = tuple(int(x) for x in text.replace("x", ",").split(",") if x.strip())
    except ValueError:
        raise ModelError(f"--input takes a shape like 1,3,224,224 (got {text!r})") from None
    if not shape or any(n < 0 for n in shape):
        raise ModelError(f"--input takes a shape like 1,3,224,224 (got {text!r})")
    elements = 1
    for n in shape:
        elements *= n
    if elements > MAX_INPUT_ELEMENTS:
        raise ModelError(f"--input {text} is {elements:,} elements ({elements * 4 / 2**30:,.1f} "
                         f"GiB as float32); an example input needs far fewer (at most "
                         f"{MAX_INPUT_ELEMENTS:,})")
    return shape


def _first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _from_file(path):
    if not os.path.isfile(path):
        raise ModelError(f"model file not found: {path}")
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(f"mpsprobe_model_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # its own helper imports
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ModelError(f"{path} raised while loading: {_first_line(e)}") from None
    finally:
        sys.path.pop(0)
    build = getattr(module, "build", None)
    if not callable(build):
        raise ModelError(f"{path} defines no build() function returning (model, example_inputs)")
    try:
        built = build()
    except Exception as e:
        raise ModelError(f"{path}: build() raised {_first_line(e)}") from None
    if not isinstance(built, (tuple, list)) or len(built) not in (2, 3):
        raise ModelError(f"{path}: build() must return (model, example_inputs[, loss])")
    model, inputs, *rest = built
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"{path}: build() returned a {type(model).__name__}, not an nn.Module")
    return LoadedModel(name, model, inputs, rest[0] if rest else None)


def _classification_loss(output):
    """Cross-entropy against class 0: a classifier's usual training loss, any targets will do."""
    if isinstance(output, torch.Tensor) and output.dim() == 2:
        return F.cross_entropy(output, torch.zeros(output.shape[0], dtype=torch.long))
    return default_loss(output)


def torchvision_install(torch_version=None, system=None):
    """The pip command installing the torchvision built for this torch, on this platform.

    torchvision 0.(N+15).P goes with torch 2.N.P. On Linux, a torch from PyTorch's own
    index (a local version like +cpu or +cu126) needs that index: the default one
    serves a CUDA build of torch with its torchvision, which pulls another torch.
    """
    version = torch_version or torch.__version__
    system = system or platform.system()
    base, _, local = version.partition("+")
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", base)
    pin = "torchvision"
    if found and found.group(1) == "2":
        pin = f"torchvision=={'0.%d.%s' % (int(found.group(2)) + 15, found.group(3))}"
    if system != "Darwin" and local:
        return f"pip install {pin} --index-url https://download.pytorch.org/whl/{local}"
    return f"pip install {pin}"


def _from_torchvision(name, input_shape):
    try:
        import torchvision.models
    except ImportError:
        raise ModelError(f"torchvision is not installed: {torchvision_install()} "
                         "(or describe the model in a .py file defining build())") from None
    except Exception as e:   # a torchvision built for another torch fails with RuntimeError
        raise ModelError(f"torchvision could not be imported ({_first_line(e)}); install the one "
                         f"matching this torch: {torchvision_install()}") from None
    try:
        model = torchvision.models.get_model(name, weights=None)
    except (ValueError, KeyError):
        raise ModelError(f"torchvision has no model named {name!r}") from None
    except Exception as e:
        raise ModelError(f"torchvision:{name} raised {_first_line(e)}") from None
    if input_shape is None:
        raise ModelError(f"torchvision:{name} needs --input, like --input 1,3,224,224")
    return LoadedModel(name, model, torch.randn(input_shape), _classification_loss)


def load(spec, input_shape=None):
    """A LoadedModel from "path/to/model.py" or "torchvision:NAME" (with `input_shape`)."""
    torch.manual_seed(0)
    if spec.startswith("torchvision:"):
        return _from_torchvision(spec.partition(":")[2], input_shape)
    check_spec(spec)   # the same refusal the parent gives before starting the model's process
    loaded = _from_file(spec)
    if input_shape is not None:
        loaded.inputs = torch.randn(input_shape)
    return loaded


def default_loss(output):
    """The scalar `--train` differentiates when the model file gives no loss: the output's sum."""
    leaves = [x for x in torch.utils._pytree.tree_flatten(output)[0]
              if isinstance(x, torch.Tensor) and x.is_floating_point()]
    if not leaves:
        raise ModelError("--train: the model's output has no floating-point tensor to differentiate")
    if len(leaves) == 1 and leaves[0].dim() == 0:
        return leaves[0]
    return sum(x.sum() for x in leaves)


def cast(loaded, dtype):
    """The model and its floating-point inputs in `dtype` (a torch.dtype), except
    float64 tensors: a float64 buffer is a deliberate choice of the model's, and
    casting it would hide the op that needs float64 (MPS has none). Those kept
    are named in `loaded.kept`."""
    kept = []
    for kind, named in (("parameter", loaded.model.named_parameters()),
                        ("buffer", loaded.model.named_buffers())):
        kept += [f"{kind} {n}" for n, t in named if t.dtype == torch.float64 and dtype != torch.float64]

    def to(t):
        if t.is_floating_point() and (t.dtype != torch.float64 or dtype == torch.float64):
            return t.to(dtype)
        return t
    loaded.model = loaded.model._apply(to)
    inputs = torch.utils._pytree.tree_flatten(loaded.inputs)[0]
    kept += [f"input {i}" for i, x in enumerate(inputs)
             if isinstance(x, torch.Tensor) and x.dtype == torch.float64 and dtype != torch.float64]
    loaded.inputs = torch.utils._pytree.tree_map(
        lambda x: to(x) if isinstance(x, torch.Tensor) else x, loaded.inputs)
    loaded.kept = tuple(kept)
    return loaded


def call(model, inputs):
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)
