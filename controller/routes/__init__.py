"""Route tables and how they change.

Modules: `tables` (Entry, Table, RouteSet: what layers above pass, push, read back and diff),
`entries` (which TE entries an assignment needs: the keying model, `build_routes`),
`budget` (entries per switch and fitting an assignment into them), `checks` (whether an
entry can live on its switch, its hop role), `plan` (diff and make-before-break plans).
"""
