"""How much each measurement of run_all.py does: the full bench's sizes and the quick check's.

Its own module so run_all.py stays within the module size limit.
"""

from __future__ import annotations

from dataclasses import dataclass

WHOLERUN_MAX_RUNS = 5


@dataclass(frozen=True)
class Sizes:
    """How much each measurement does: the full bench's, or the quick check's."""

    repeat: int
    pack_mb: int
    request_files: int
    startup_replicas: tuple[int, ...]
    naive_replicas: tuple[int, ...]
    wholerun_runs: int
    tensorflow_import_profile: bool
    concurrency_jobs: int
    train_seconds: int
    restart_cases: tuple[str, ...]  # bench_restart.py's how:replicas:checkpoint_interval
    restart_repeat: int
    scale_replicas: tuple[int, ...]  # bench_scale.py: one gang of each size, simulated nodes
    scale_repeat: int
    # bench_concurrent_scale.py (7b): batches of concurrent 8-replica jobs through Airflow
    scale_jobs: tuple[int, ...] = (10, 50, 100)
    scale_run_seconds: int = 150  # how long each hollow replica "trains" (see the bench)
    # bench_log_follow.py (8): one line of each size, then MiB of ordinary lines
    log_follow_line_mib: tuple[int, ...] = (4, 8, 16, 32)
    log_follow_lines_mib: int = 32
    log_follow_repeat: int = 3
    # bench_s3_gate.py (9): a pod's GET and POST of 1 MiB, gate against no gate, per side
    s3_gate_requests: int = 60
    # bench_event_curves.py (10): MiB of event files under one run
    event_curves_mib: float = 50.0
    # bench_phases.py (3b): traced runs of this tree, and of the baseline commit's in its own
    # world (0: no baseline; the runs of this tree are traced on the shared world)
    phases_runs: int = 5
    phases_baseline_runs: int = 5
    # bench/chaos.py (issue 30): runs and faults of the soak (0: none; `make chaos` is the
    # full soak, its own target)
    chaos_runs: int = 0
    chaos_faults: int = 0


FULL = Sizes(
    5,
    40,
    1000,
    (2, 8, 32),
    (8, 32),
    WHOLERUN_MAX_RUNS,
    True,
    20,
    15,
    ("drain:4:10", "drain:16:10", "kill:4:10", "kill:4:60"),
    3,
    (128, 512, 1024),
    3,
)
# No 7b in --quick: its own Airflow takes ~3 min to start, and make test runs its smallest
# batch end to end (tests/bench/test_bench_concurrent_scale.py).
QUICK = Sizes(
    1,
    8,
    100,
    (2, 8),
    (8,),
    1,
    False,
    2,
    5,
    ("drain:4:10", "kill:4:10"),
    1,
    (32,),
    1,
    (),
    30,
    log_follow_line_mib=(1,),
    log_follow_lines_mib=1,
    log_follow_repeat=1,
    s3_gate_requests=5,
    event_curves_mib=2.0,
    phases_runs=1,
    phases_baseline_runs=0,
    chaos_runs=6,
    chaos_faults=3,
)
