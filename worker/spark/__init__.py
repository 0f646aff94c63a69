"""Spark jobs around the worker's topics: load tables, read state back, run on a cluster.

The only package that imports pyspark, and only in the modules that run jobs
(``load``, ``datasource``, ``export``, ``progress``, ``profiles``, ``files``,
``session``): importing ``worker.spark``, ``worker.spark.cli``, ``cli_jobs``,
``encoding``, ``decoding``, ``executor`` or ``target`` does not need the extra.

- ``load.load_table``: any DataFrame into any table topic, checked, as a snapshot (only
  changes and deletes) or as upserts, one transaction per Kafka partition;
- ``datasource``: ``format("worker")``, tables and store changelogs as DataFrames
  (read_committed, latest value per key, decoded with the worker's serdes), and the
  transactional writer the loads use;
- ``export``: a store to Parquet, and reconciliation against a recomputation;
- ``profiles.load_account_profiles``: the example app's ``account-profiles`` job;
- ``cli`` and ``cli_jobs``: ``worker spark load | export | reconcile | submit``.
"""
