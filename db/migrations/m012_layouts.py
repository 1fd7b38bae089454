"""Schema 11 -> 12: `layout`, the input layout a case ran its sample in.

Null for the sample as OpInfo (or a module probe) made it; otherwise one of
ops/layouts.py's LAYOUTS: the same sample's input re-laid-out (transposed,
strided, expanded, channels_last, offset), a variant of the same case, judged
against the CPU on the same values. Its case id ends in "@layout".
"""


def migrate(db):
    for table in ("results", "cases"):
        if "layout" not in db[table].columns_dict:
            db.execute(f'ALTER TABLE {table} ADD COLUMN "layout" TEXT')
