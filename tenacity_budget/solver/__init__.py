"""Pure math of budgeted exponential backoff: the nominal delays and the exact budget solver.

Nothing here is random and nothing here knows about tenacity or pydantic. The definition
(the delay ``d(k) = min(cap, base * factor ** k)`` in floats, ``cap`` where the power
overflows; the largest ``n`` with ``S(n) + (n + 1) * attempt_duration <= budget``, exactly),
how the solver stays constant time, its limit (``2**14`` delays summed exactly per call) and
what it assumes of the platform are in docs/concepts.md, "The closed-form solver". The
modules: ``_delays`` (the public delays), ``_floats`` (error model, constants, arguments),
``_exact`` (exact sums), ``_search`` (the exact search below the cap), ``_solve``
(:func:`compute_max_attempts` in phases).
"""

from __future__ import annotations

from ._delays import add_compensated as add_compensated
from ._delays import backoff_delays as backoff_delays
from ._delays import capped_index as capped_index
from ._delays import nominal_delay as nominal_delay
from ._delays import total_delay as total_delay
from ._solve import compute_max_attempts

__all__ = ["compute_max_attempts"]
