"""A fabric built for real in Linux network namespaces: lab up/down/status, its underlay
(static ECMP or FRR eBGP), link changes and real-packet verification."""
