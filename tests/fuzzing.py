"""Settings shared by the fuzz suites (tests/test_fuzz_*.py, marker ``fuzz``).

CI runs a small number of examples per property on every ``.ci/run``. The long
profile is the same properties with many more examples, run by hand:

    DASQ_FUZZ_EXAMPLES=1200 pytest -m fuzz

(about seven minutes on the 2-core development machine for the three suites, programs,
stores and front ends; docs/guarantees.md).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES = int(os.environ.get("DASQ_FUZZ_EXAMPLES", "25"))

FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,  # every run explores afresh; a failure prints its example
)
