"""Operating a running job: its Prometheus metrics, its run file, and ``revise status``.

- :mod:`revise.ops.metrics` — the job's metrics (``revise run --metrics-port``), fed by the
  driver from what it already holds: Spark's progress reports and each committed batch's
  Arrow tables; served by ``prometheus_client`` from a per-job registry.
- :mod:`revise.ops.runfile` — ``<checkpoint>/revise-run.json``: where the job writes, its pid
  and a heartbeat, so that ``revise status`` can find the outputs and tell a running job.
- :mod:`revise.ops.status` — where a running or stopped job stands (``revise status``).

docs/OPERATIONS.md describes them for users.
"""
