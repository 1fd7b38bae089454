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



def _package_paths():
    return {
        "mpsprobe": os.path.dirname(os.path.abspath(mpsprobe.__file__)),
        "mpsprobe.ops": os.path.dirname(os.path.abspath(mpsprobe.ops.__file__)),
    }


def worker_command(config, python=None):
    """The argv that starts a worker with `config` under `python` (default: this one)."""
    bootstrap = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap.py")
    return [python or sys.executable, bootstrap, json.dumps(_package_paths()), json.dumps(config)]
