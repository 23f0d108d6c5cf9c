"""Switch drivers: the interface (read, apply, close), the safe push and the reconciler.

Public: `interface.Driver` and `driver_class` (found by entry point `fabric_te.drivers`),
`push.push`/`read_back`, `reconcile.Reconciler`, `conformance.DriverConformance` (the suite
every driver passes); drivers `file` and `linux` (with `linux_plan`, `labs`).
"""
