"""From flows and link health to one path per flow, and how good it is.

The face, what the service, the command line and the advisor take from the solver:

- a global solve: `solve(fabric, health, flows, previous=, options=SolveOptions())` ->
  `SolveResult` (an assignment, its MLU against the lower `Bound`, the certificate);
  `certified(fabric, health, result, options)`: a result certified in full (a settled
  repair whose certificate was deferred); `mlu_counted`: a result's MLU counted after its
  push where the certificate left it (`CertifyOptions.mlu_later`);
- incremental reaction to link changes: `RouteIndex` of an installed assignment,
  `repair_indexed` (-> `AssignResult` and the new index), `follow_up` (settle it, or
  re-optimise within `REOPT_TRIES`), `bound_under` (the lower `Bound` under the new
  health, derived from the last one where it holds);
- `Problem` (one solve's inputs and what the stages derive from them);
- the certificate's `Certificate` and `CertifyOptions` (no job below the fabric's own
  hashing);
- `warm_up` (compile the kernels before the first solve needs them).

Internals, for the solver's own modules, its tests and the advisor (which places flows with
`greedy.greedy` and `greedy.local_search`): `problem`, `candidates`, `greedy`, `colouring`,
`lp`, `commodities`, `qp_buckets`, `kernels`, `bounds` (`lower_bound`), `repair`,
`certificate`, `solve`.
Here `solve` names the function: the module's other names are imported from it directly
(`from controller.solver.solve import repair`), not as `import controller.solver.solve`.
"""

from controller.solver.bounds import Bound
from controller.solver.certificate import Certificate, CertifyOptions
from controller.solver.greedy import AssignResult, warm_up
from controller.solver.problem import Problem
from controller.solver.repair import (
    REOPT_TRIES,
    FollowUp,
    RouteIndex,
    bound_under,
    follow_up,
    repair_indexed,
)
from controller.solver.solve import (
    SolveOptions,
    SolveResult,
    carried_off_te,
    certified,
    mlu_counted,
    solve,
    table_figures,
)

__all__ = [
    "REOPT_TRIES",
    "AssignResult",
    "Bound",
    "Certificate",
    "CertifyOptions",
    "Problem",
    "RouteIndex",
    "SolveOptions",
    "SolveResult",
    "bound_under",
    "carried_off_te",
    "certified",
    "FollowUp",
    "follow_up",
    "mlu_counted",
    "repair_indexed",
    "solve",
    "table_figures",
    "warm_up",
]
