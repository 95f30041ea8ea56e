"""turnqueue's benchmarks (issue 6): every figure is a ratio against a baseline run side by side.

``python -m bench [--smoke] [--only P1,P3] [--out bench/results] [--profile]`` runs P1–P6 on
SQLite and, when ``TURNQUEUE_TEST_DATABASE_URL`` is set, on PostgreSQL; see
``bench/results/README.md``.
"""
