"""Schema 7 -> 8: `results.aten_dtypes`, the dtypes each aten op a case dispatched ran in.

JSON {aten op: [dtype, …]}, each call filed as mpsprobe.engine.aten.filed_dtypes
files a model's (its first tensor argument's dtype; a conversion's target as well):
a float32 `fft.irfft2` case runs `aten::_fft_c2r` on complex64. `check` files a
case's passes, and where it was probed, under those dtypes. Null for results
recorded before: their ops count under the case's dtype, as before.
"""


def migrate(db):
    if "aten_dtypes" not in db["results"].columns_dict:
        db.execute('ALTER TABLE results ADD COLUMN "aten_dtypes" TEXT')
