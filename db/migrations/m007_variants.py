"""Schema 6 -> 7: `results.aten_variants`, the kernel variant of each aten op a case dispatched.

JSON {aten op: [variant, …]}, a variant as mpsprobe.engine.aten.variant
spells it ("4-D transposed=False", "3-D dim=(-1)"): the input's rank and the
arguments that choose a kernel. `check` answers a model's call from the cases
that ran the same variant (a 5-D convolution failing says nothing of 2-D ones).
Null for results recorded before: they are answered per op, as before.
"""


def migrate(db):
    if "aten_variants" not in db["results"].columns_dict:
        db.execute('ALTER TABLE results ADD COLUMN "aten_variants" TEXT')
