"""Reading what a target says: the engine's one door to the message catalogue.

Every text a target raises, warns or prints is read by `messages` (the
catalogue of MPS message families, as data); this module only gives the engine
the few names it calls, so no other module matches target texts itself.
"""
from .messages import (FAMILY, classify_error, classify_message, crash_evidence,  # noqa: F401
                       describe, fallback_from_warning, fallback_ops, first_line)

# An argument the op needs on the CPU, whatever device its input is on (tensor_split's indices).
WANTS_CPU_ARGUMENT = FAMILY["argument_wants_cpu"].pattern
