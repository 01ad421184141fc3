"""The Spark adapter: the only part of ``revise`` that imports pyspark."""
