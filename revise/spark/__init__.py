"""The job's Spark adapter: session, parsing, the query by stage, the commit, the driver.

``stream`` (source → parse → watermark → shard) → ``operator`` (the engine in
transformWithStateInPandas, its state kept by ``shard_state``; Arrow out) →
``committer`` (Kafka, then Delta) ← ``driver`` (starts and watches the query). This is where
the *job* touches pyspark; the tools use Spark too, through the session made here:
``revise.query`` (views over the Delta tables), ``revise.compare`` and ``benchmarks/``. The
pure core (``revise.engine``, ``windows``) never imports it.
"""
