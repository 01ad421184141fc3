"""The notebooks run top to bottom (nbclient, real Kafka, Spark and Delta) so they never rot.

The kernel is this interpreter (a kernelspec written for the test, first on ``JUPYTER_PATH``),
so it has the same packages. The notebooks get the session's broker through
``REVISE_BOOTSTRAP_SERVERS`` and so start none; their own Spark session is stopped by their
last cell. The committed files are not rewritten: executing them for the repository is
``python tests/integration/test_notebooks.py`` (saves the outputs; needs
``REVISE_BOOTSTRAP_SERVERS`` or starts a broker per notebook).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta, pytest.mark.slow]

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CELL_TIMEOUT_S = 900


def _kernel_home(root: Path) -> Path:
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (revise tests)", "language": "python",
    }))
    return root


def execute(path: Path, *, jupyter_path: Path | None = None) -> Any:
    """Run a notebook top to bottom in a python3 kernel of this interpreter; return it."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if jupyter_path is not None:
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            p for p in (str(jupyter_path), os.environ.get("JUPYTER_PATH")) if p)
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb


def _outputs(nb: Any) -> list[dict[str, Any]]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _text(nb: Any) -> str:
    parts: list[str] = []
    for o in _outputs(nb):
        if "text" in o:
            parts.append(o["text"])
        for mime in ("text/plain", "text/html"):
            if mime in o.get("data", {}):
                parts.append(o["data"][mime])
    return "\n".join(parts)


def _pngs(nb: Any) -> int:
    return sum(1 for o in _outputs(nb) if "image/png" in o.get("data", {}))


@pytest.fixture()
def kernel_env(kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REVISE_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("PYTHONWARNINGS", "ignore::FutureWarning")
    monkeypatch.setenv("JUPYTER_PATH", os.environ.get("JUPYTER_PATH", ""))
    # The notebooks keep their working folder for the reader (tempfile.mkdtemp): under the
    # test's own folder, which pytest prunes, it does not pile up in /tmp run after run.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    return _kernel_home(tmp_path / "jupyter")


def _no_errors(nb: Any) -> None:
    errors = [o for o in _outputs(nb) if o.get("output_type") == "error"]
    assert not errors, errors[0].get("evalue")
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code")


def test_quickstart_runs(kernel_env: Path) -> None:
    nb = execute(NOTEBOOKS / "quickstart.ipynb", jupyter_path=kernel_env)
    _no_errors(nb)
    text = _text(nb)
    assert sys.executable in text or "Kafka at" in text
    assert "micro-batches" in text and "revisions" in text
    for timing in ("EARLY", "LATE", "FINAL"):
        assert timing in text  # the timing table and the timeline's revisions
    assert "too_late" in text and "reason" in text  # late records and dead letters
    assert "at version 0:   0" in text  # time travel: nothing reported at creation
    assert "highest" in text  # the in-process engine answered (and equalled Spark in the cell)
    assert _pngs(nb) >= 1  # the timeline


def test_compare_modes_runs(kernel_env: Path) -> None:
    nb = execute(NOTEBOOKS / "compare_modes.ipynb", jupyter_path=kernel_env)
    _no_errors(nb)
    text = _text(nb)
    assert "revisions per window" in text and "what a larger grace would have kept" in text
    assert "finals_changed" in text  # the what-if table
    assert "first_result_p50" in text  # read back from the comparisons Delta table
    assert _pngs(nb) == 3


def test_percentiles_runs(kernel_env: Path) -> None:
    nb = execute(NOTEBOOKS / "percentiles.ipynb", jupyter_path=kernel_env)
    _no_errors(nb)
    text = _text(nb)
    assert "p99_ms" in text and "users" in text  # the p99 per endpoint per minute
    assert "LATE revisions; the ones that moved p99" in text and "p99_before" in text
    assert "largest relative error of the FINAL p99" in text  # checked within 1 % in the cell


def test_speculation_runs(kernel_env: Path) -> None:
    nb = execute(NOTEBOOKS / "speculation.ipynb", jupyter_path=kernel_env)
    _no_errors(nb)
    text = _text(nb)
    # one window's revisions with completeness and est_count against the final count
    for column in ("completeness", "est_count", "final_count", "realised"):
        assert column in text
    # the calibration figures, computed in the cell from the run's own revisions
    mae = float(text.split("mean |completeness - realised fraction|: ")[1].split()[0])
    assert 0.0 <= mae <= 10.0
    # what was known at three points: provisional, then final
    assert text.count("as of watermark") == 3
    assert "(after end + grace)" in text and "True" in text
    # the sweep: recommendation line, table and plot (plus the window's own figure)
    assert "for accuracy >= 0.85" in text or "no setting reaches accuracy 0.85" in text
    assert "on_frontier" in text
    assert _pngs(nb) == 2


if __name__ == "__main__":  # refresh the committed outputs
    import tempfile

    import nbformat

    home = _kernel_home(Path(tempfile.mkdtemp()))
    for name in sys.argv[1:] or ["quickstart.ipynb", "compare_modes.ipynb", "percentiles.ipynb",
                                 "speculation.ipynb"]:
        done = execute(NOTEBOOKS / name, jupyter_path=home)
        nbformat.write(done, NOTEBOOKS / name)
        print("executed and saved", name)
