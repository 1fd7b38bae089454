"""Starting a worker in any Python that has torch, even one without mpsprobe installed.

The worker needs only the `mpsprobe` runner and `mpsprobe.ops`; they are loaded
from this installation's own folders, so a worker can run in another virtual
environment (another torch version) with nothing but torch and expecttest there.
"""
import json
import os
import sys

import mpsprobe
import mpsprobe.ops

_BOOTSTRAP = """
import importlib.util, inspect, json, sys
# OpInfo's sample_inputs calls inspect.stack(), which scans every loaded module
# for a frame whose file does not exist, like this "<string>" one, each time:
# naming its module here makes that a lookup (it was most of a sweep's time).
inspect.modulesbyfile["<string>"] = "__main__"
for name, path in json.loads(sys.argv[1]).items():
    spec = importlib.util.spec_from_file_location(
        name, path + "/__init__.py", submodule_search_locations=[path])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if "." in name:
        parent, _, child = name.rpartition(".")
        setattr(sys.modules[parent], child, module)
from mpsprobe.worker import main
main(sys.argv[2])
"""


def _package_paths():
    return {
        "mpsprobe": os.path.dirname(os.path.abspath(mpsprobe.__file__)),
        "mpsprobe.ops": os.path.dirname(os.path.abspath(mpsprobe.ops.__file__)),
    }


def worker_command(config, python=None):
    """The argv that starts a worker with `config` under `python` (default: this one)."""
    return [python or sys.executable, "-c", _BOOTSTRAP,
            json.dumps(_package_paths()), json.dumps(config)]
