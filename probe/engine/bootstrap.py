"""Run as a script: start a worker in any Python that has torch.

    python bootstrap.py '{"mpsprobe": "/path/probe", "mpsprobe.ops": "/path/ops"}' CONFIG_JSON

Loads the `mpsprobe` runner and `mpsprobe.ops` from the folders given, so the
interpreter needs nothing of mpsprobe installed (another torch's environment).
It is a real file, not `python -c`, for speed: OpInfo's sample generators
call inspect.stack(), and a frame without a file makes every such call scan
all loaded modules.
"""
import importlib.util
import json
import sys


def load(paths):
    for name, path in paths.items():  # parents before children
        spec = importlib.util.spec_from_file_location(
            name, path + "/__init__.py", submodule_search_locations=[path])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        if "." in name:
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, module)


if __name__ == "__main__":
    del sys.path[0]  # this script's folder: its modules are only importable as mpsprobe.*
    load(json.loads(sys.argv[1]))
    from mpsprobe.engine.worker import main
    main(sys.argv[2])
