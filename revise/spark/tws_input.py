"""A columnar reader for ``transformWithStateInPandas``' input in the Python workers.

PySpark 4.2's ``TransformWithStateInPandasSerializer.load_stream`` turns each Arrow batch it
receives into pandas, then walks it **row by row** (``itertuples``) to split it by grouping key,
and builds a new DataFrame per key from the row tuples. revise's operator has a handful of
grouping keys (shards) and hundreds of thousands of rows per micro-batch, so that walk was most
of what the move to ``transformWithStateInPandas`` added: on the 1,000-key throughput workload
(docs/lab/benchmarks-diary.md) the Python workers' CPU went from 3.4 s to 7.6 s for 2M
records.

:func:`install` replaces the method with :func:`load_stream`, which yields the same thing — the
same ``(mode, key, chunks)`` sequence, each chunk a ``(key, DataFrame)`` of consecutive rows of
one key, cut at the same record and byte limits — by finding the key runs of each batch with
numpy and slicing the batch's DataFrame. ``tests/revise/test_tws_input.py`` checks both
readers give the same keys and rows on the same Arrow stream. Installed only on the PySpark
version it was written against (:data:`FOR_PYSPARK`); elsewhere PySpark's own runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import groupby
from typing import Any, Final

import numpy as np

__all__ = ["FOR_PYSPARK", "install", "installed", "load_stream"]

FOR_PYSPARK: Final = "4.2."
"""The PySpark release line whose serializer :func:`load_stream` mirrors."""

_ORIGINAL = "_revise_original_load_stream"


def installed() -> bool:
    """Whether :func:`install` replaced PySpark's method in this process."""
    from pyspark.sql.pandas.serializers import TransformWithStateInPandasSerializer

    return hasattr(TransformWithStateInPandasSerializer, _ORIGINAL)


def install() -> bool:
    """Replace PySpark's row-by-row reader with :func:`load_stream` (idempotent).

    Returns whether it is installed (False on another PySpark version).
    """
    import pyspark

    if not pyspark.__version__.startswith(FOR_PYSPARK):
        return False
    from pyspark.sql.pandas.serializers import TransformWithStateInPandasSerializer as Ser

    if not hasattr(Ser, _ORIGINAL):
        setattr(Ser, _ORIGINAL, Ser.load_stream)
        Ser.load_stream = load_stream  # type: ignore[method-assign]
    return True


def load_stream(self: Any, stream: Any) -> Iterator[tuple[Any, Any, Any]]:
    """PySpark's ``TransformWithStateInPandasSerializer.load_stream``, columnar.

    Yields ``(PROCESS_DATA, key, chunks)`` per run of one grouping key (``chunks``: its
    ``(key, DataFrame)`` pieces), then ``(PROCESS_TIMER, None, None)`` and
    ``(COMPLETE, None, None)``, as PySpark's does.
    """
    from pyspark.sql.pandas.serializers import ArrowStreamPandasSerializer
    from pyspark.sql.streaming.stateful_processor_util import (
        TransformWithStateInPandasFuncMode as Mode,
    )

    batches = super(ArrowStreamPandasSerializer, self).load_stream(stream)
    for key, chunks in groupby(_chunks(self, batches), key=lambda c: c[0]):
        yield (Mode.PROCESS_DATA, key, chunks)
    yield (Mode.PROCESS_TIMER, None, None)
    yield (Mode.COMPLETE, None, None)


def _chunks(ser: Any, batches: Iterator[Any]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """``(key, DataFrame)`` of each run of one key in each batch.

    Runs are cut at the serializer's record and byte limits.
    """
    import pandas as pd
    from pyspark.sql.pandas.serializers import ArrowBatchTransformer

    for batch in batches:
        ser._update_batch_size_stats(batch)
        if batch.num_rows == 0:
            continue
        frame = pd.concat(
            ArrowBatchTransformer.to_pandas(
                batch, timezone=ser._timezone, schema=ser._input_type,
                struct_in_pandas=ser._struct_in_pandas, ndarray_as_list=ser._ndarray_as_list,
                prefer_int_ext_dtype=ser._prefer_int_ext_dtype, df_for_struct=ser._df_for_struct,
            ),
            axis=1,
        )
        keys = [frame.iloc[:, o].to_numpy() for o in ser.key_offsets]
        n = len(frame)
        starts = np.zeros(n, dtype=bool)
        starts[0] = True
        for k in keys:
            starts[1:] |= k[1:] != k[:-1]
        bounds = [*np.flatnonzero(starts).tolist(), n]
        step = _rows_per_chunk(ser)
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            key = tuple(_scalar(k[lo]) for k in keys)
            for a in range(lo, hi, step):
                yield key, frame.iloc[a:min(a + step, hi)].reset_index(drop=True)


def _rows_per_chunk(ser: Any) -> int:
    """The rows PySpark's reader puts in one chunk before cutting (its two limits)."""
    rows = int(ser.arrow_max_records_per_batch)
    size = float(ser.average_arrow_row_size)
    if size > 0:
        # PySpark cuts once rows * average size >= the byte limit.
        rows = min(rows, max(1, int(np.ceil(ser.arrow_max_bytes_per_batch / size))))
    return max(1, rows)


def _scalar(value: Any) -> Any:
    """A key value as the Python scalar PySpark's row walk gives."""
    return value.item() if isinstance(value, np.generic) else value
