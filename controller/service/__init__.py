"""The long-running controller: gRPC in, routes out through the drivers.

Protobuf types appear only in `convert`, `servicer` and `client`; the engine works on plain
data. The engine (`engine.Engine`) is a worker loop over pure decisions (`rounds`) with
`intake` (inputs checked, stored, applied), `installer` (wanted and installed routes, push,
read-back), `solves` (global solves in a thread), `predictor`, `restored` (the figures of a
routing adopted from the store), `latency`, `frozen`, with its read side in `reads`; around it
`state`, `store`/`etcd`/`persist`/`replica` (state outside the process, leadership),
`server`/`servicer`/`guard`/`auth`/`limits`/`tls`/`certs` (the API and its protection),
`metrics`, `logs`, `route_query`, `job_view`, `client` (the typed client tectl uses).
"""
