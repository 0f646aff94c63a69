"""Spark batch jobs that compute tables and write them into their compacted topics.

The only package that imports pyspark, and only in the modules that run jobs
(``load``, ``profiles``, ``files``, ``session``): importing ``worker.spark``,
``worker.spark.cli``, ``encoding``, ``executor`` or ``target`` does not need the extra.

- ``load.load_table``: any DataFrame into any table topic, checked before writing;
- ``profiles.load_account_profiles``: the example app's ``account-profiles`` job;
- ``cli``: ``worker spark load ...`` (local mode, or ``--print-submit``).
"""
