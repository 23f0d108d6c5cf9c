"""Fabrics, workloads, baselines, the flow-level simulator and emulated switches."""
