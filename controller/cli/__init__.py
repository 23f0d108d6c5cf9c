"""`tectl`, the command line (nothing imports this layer; it is run).

Modules: `main` (the parser and exit codes' mapping), `commands` (what a command plug-in gets),
`offline`, `service`, `advise`, `certs`; more commands plug in under `fabric_te.commands`.
"""
