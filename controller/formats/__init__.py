"""Files in and out: fabric files, placement (job) files, route files, topology exports for
schedulers, and command output (tables, strict JSON).

Modules: `fabric_file`, `placement`, `route_file` (JSON), `route_columns` (.npz), `route_checks`
(what both share), `topology`, `output`.
"""
