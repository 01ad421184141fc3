"""The core stays pure (no Spark/Kafka imports) and our files pass ruff and mypy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from revise.engine.fixed import _pack_ids
from revise.engine.sessions import _sort_key_start_tie

ROOT = Path(__file__).resolve().parents[2]
OURS = ["windows", "revise/engine", "revise/records.py", "revise/config.py", "revise/vocab.py",
        "revise/local.py", "benchmarks/bench_engine.py"]


def test_core_imports_with_spark_and_kafka_blocked():
    code = (
        "import sys\n"
        "for m in ('pyspark', 'confluent_kafka', 'delta', 'deltalake'):\n"
        "    sys.modules[m] = None\n"
        "import windows, revise.engine, revise.local, revise.records, revise.config\n"
        "import numpy as np\n"
        "from revise.config import EngineConfig, WindowSpec\n"
        "from revise.engine import InputBatch\n"
        "outs = revise.local.run_batches(EngineConfig(WindowSpec.parse('session:1s'), 0),\n"
        "    [InputBatch.from_arrays(['a'], np.array([5]), [1.0])])\n"
        "assert len(outs[-1].revisions) == 1\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('revise', 'sinks') and\n"
        "       m not in ('revise', 'revise.local', 'revise.records', 'revise.vocab',\n"
        "                 'revise.record_batches', 'revise.config', 'revise.errors',\n"
        "                 'revise.aggspec') and\n"
        "       not m.startswith('revise.engine')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_windows_imports_only_numpy_and_stdlib():
    for path in (ROOT / "windows").glob("*.py"):
        text = path.read_text()
        for banned in ("import revise", "from revise", "import sinks", "from sinks",
                       "import pandas", "import pyarrow", "pyspark", "confluent_kafka"):
            assert banned not in text, (path, banned)


def test_packing_fallbacks_agree_with_lexsort():
    rng = np.random.default_rng(1)
    k = rng.integers(0, 5000, 300)
    wi = rng.choice([0, 1, 2**50, 2**50 + 1], 300)
    sk = rng.integers(0, 5000, 50)
    swi = rng.choice([0, 2**50], 50)
    ids, sids = _pack_ids(k, wi, sk, swi, 5000)  # too wide to pack: ranks instead
    all_ids = np.concatenate((ids, sids))
    pairs = list(zip(np.concatenate((k, sk)).tolist(), np.concatenate((wi, swi)).tolist(),
                     strict=True))
    for i in range(len(pairs)):
        for j in range(0, len(pairs), 7):
            assert (pairs[i] < pairs[j]) == (all_ids[i] < all_ids[j])
            assert (pairs[i] == pairs[j]) == (all_ids[i] == all_ids[j])
    start = rng.choice([0, 5, 2**53 - 1], 300)
    tie = rng.integers(0, 10, 300)
    o = _sort_key_start_tie(k, start, tie, 10)
    assert np.array_equal(o, np.lexsort((tie, start, k)))
    o2 = _sort_key_start_tie(k % 3, start % 100, tie, 10)
    got = list(zip((k % 3)[o2].tolist(), (start % 100)[o2].tolist(), tie[o2].tolist(),
                   strict=True))
    assert got == sorted(got)
