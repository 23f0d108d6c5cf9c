"""The fabric and its traffic as plain data: presets and fabrics, flows, link health, paths,
assignments, jobs, the rate model, and the input rules every entry point shares.

Modules: `clos` and `fabric` (shapes, names, capacities), `flows`, `health`, `paths`,
`assignment`, `jobs`, `rates` (max-min fair rates, per-job bus bandwidth), `hashing`
(ECMP, E-ECMP, capacity-aware WCMP hop by hop), `dataplane` (what the switches carry for a
TE routing), `validation`, `documents`.
"""
