"""Benchmarks of tenacity-budget: solver, per-retry overhead, memory and contention.

Each module runs with one command from the repository root and prints ratios measured in
the same run::

    python -m benchmarks.solver        # compute_max_attempts vs the seed's loop
    python -m benchmarks.overhead      # per-retry cost vs tenacity, stamina, backoff
    python -m benchmarks.memory        # peak memory, 10**6 retries, 10,000 concurrent runs
    python -m benchmarks.contention    # Brooker's OCC contention experiment (full sweep)
    python -m benchmarks.report        # tables of docs/benchmarks.md and the SVG figures

Every run writes its figures to ``benchmarks/results/<name>.json``; ``benchmarks.report``
renders the tables in ``docs/benchmarks.md`` and the contention figures from those files,
so the published numbers and figures come from the same runs.
"""
