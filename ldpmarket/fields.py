"""Model fields of the plumbing (docs/architecture.md#storage).

``Int64ArrayField``: a one-dimensional array of 64-bit integers, read as a numpy ``int64`` array.  PostgreSQL
stores it as ``bigint[]`` (written by binary ``COPY``: ``pgbinary.Column.int8_array``; unnested by SQL views);
SQLite, the embedded default, as the JSON text of the list (``json_each`` unnests it).  The compact ledger keeps
its per-value columns in such arrays (docs/budget-rules.md#the-ledger).
"""
from __future__ import annotations

import json

import numpy as np
from django.db import models


class Int64ArrayField(models.Field):
    description = "A one-dimensional array of 64-bit integers"

    def db_type(self, connection):
        return "bigint[]" if connection.vendor == "postgresql" else "text"

    def from_db_value(self, value, expression, connection):
        if value is None:
            return None
        if isinstance(value, str):
            value = json.loads(value)
        return np.asarray(value, dtype=np.int64)

    def to_python(self, value):
        if value is None or isinstance(value, np.ndarray):
            return value
        if isinstance(value, str):
            value = json.loads(value)
        return np.asarray(value, dtype=np.int64)

    def get_db_prep_value(self, value, connection, prepared=False):
        if value is None:
            return None
        ints = [int(v) for v in np.asarray(value, dtype=np.int64).tolist()]
        return ints if connection.vendor == "postgresql" else json.dumps(ints, separators=(",", ":"))

    def value_to_string(self, obj):
        value = self.value_from_object(obj)
        return "" if value is None else json.dumps(np.asarray(value).tolist())
