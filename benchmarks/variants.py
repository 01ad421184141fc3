"""The variants of ``benchmarks.bench_job`` and ``benchmarks.bench_startup``, by name.

A variant is a base name (:data:`ALL_VARIANTS`) and suffixes: ``@base`` runs it from another
source tree (``--baseline``), ``+jdk`` on another Java (``--java-home``), and each of
:data:`JVM_SUFFIXES` with one more JVM option. :func:`pairs` says which runs' throughputs are
compared.
"""

from __future__ import annotations

__all__ = ["ALL_VARIANTS", "BASELINE_SUFFIX", "JDK_SUFFIX", "JVM_SUFFIXES", "VARIANTS", "pairs",
           "split_jvm_suffixes"]

VARIANTS = ("revision-eos", "revision-plain", "watermark-eos", "spark-native")
"""``bench_job``'s default variants."""
ALL_VARIANTS = (*VARIANTS, "revision-noop", "revision-overlap", "spark-native-kafka")


BASELINE_SUFFIX = "@base"
JDK_SUFFIX = "+jdk"
"""``VARIANT+jdk`` runs VARIANT on the Java of ``--java-home``."""
JVM_SUFFIXES = {
    "+c1": ("-XX:TieredStopAtLevel=1", "only the JVM's quick C1 compiler"),
    "+pgc": ("-XX:+UseParallelGC", "the parallel garbage collector instead of G1"),
    "+jit1": ("-XX:CompileThresholdScaling=1",
              "the JVM's own compile thresholds (revise doubles them: "
              "revise.spark.session.JIT_OPTIONS)"),
}
"""A variant named ``VARIANT+c1``, ``VARIANT+pgc``, ``VARIANT+jit1`` (or ``VARIANT@base+c1``,
``VARIANT+c1+pgc``) runs with each suffix's JVM option appended to ``$REVISE_JVM_OPTIONS`` for
its process."""


def split_jvm_suffixes(name: str) -> tuple[str, list[str]]:
    """``name`` without its :data:`JVM_SUFFIXES`, and their options (the last suffix first)."""
    options: list[str] = []
    while suffix := next((sfx for sfx in JVM_SUFFIXES if name.endswith(sfx)), None):
        name = name.removesuffix(suffix)
        options.append(JVM_SUFFIXES[suffix][0])
    return name, options


def pairs(variants: list[str]) -> list[tuple[str, str]]:
    """The (ours, peer) pairs whose throughput ratio is printed.

    Revise against Spark native, ``revision-eos`` against ``revision-overlap`` and
    ``revision-noop`` (its throughput ÷ ``revision-eos``'s is how much the output slows the
    job), a variant against its ``@base`` run, and a ``+jdk``, ``+c1``… variant against the
    same variant and against native (a ``+jdk`` one on the same Java; with a JVM option, with
    the same option too, when it ran).
    """
    found: list[tuple[str, str]] = [(ours, peer) for peer in ("spark-native", "spark-native-kafka")
             for ours in ("revision-eos", "revision-overlap", "watermark-eos")
             if ours in variants and peer in variants]
    for other in ("revision-overlap", "revision-noop"):  # noop ÷ eos: what the output costs
        if other in variants and "revision-eos" in variants:
            found.append((other, "revision-eos"))
    found += [(v, v + BASELINE_SUFFIX) for v in variants if v + BASELINE_SUFFIX in variants]
    # a +jdk run against native on the same Java only; a JVM option's against native with or
    # without it
    peers_of = {JDK_SUFFIX: (JDK_SUFFIX,), **{sfx: ("", sfx) for sfx in JVM_SUFFIXES}}
    for sfx, ends in peers_of.items():
        found += [(v + sfx, v) for v in variants if v + sfx in variants]
        found += [(ours + sfx, peer + end)
                  for peer in ("spark-native", "spark-native-kafka")
                  for ours in ("revision-eos", "watermark-eos") for end in ends
                  if ours + sfx in variants and peer + end in variants]
    return found
