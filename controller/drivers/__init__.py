"""Switch drivers: the interface (read, apply, close), the safe push and the reconciler.

Public: `interface.Driver` and `driver_class` (found by entry point `fabric_te.drivers`),
`push.push`/`read_back`, `reconcile.Reconciler`, `conformance.DriverConformance` (the suite
every driver passes); drivers `file`, `linux` (with `linux_plan`, `labs`), `sonic` (with
`sonic_plan`, `sonic_schema`, `redis_server`) and `ovs` (with `ovs_daemons`).
"""
