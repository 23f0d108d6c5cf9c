"""From flows and link health to one path per flow, and how good it is.

Public: `solve.solve` with `SolveOptions` -> `SolveResult`; `repair.repair`/`repair_indexed`,
`follow_up`, `RouteIndex` (incremental reaction to link changes); `bounds.lower_bound`;
`greedy.warm_up` (the compiled kernels); `certificate.certify` (no job below the fabric's own
hashing). Internals: `greedy`, `colouring`, `lp`,
`commodities`, `qp_buckets`, `kernels`.
"""
