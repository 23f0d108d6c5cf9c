"""Placement advice: where a new job should go, scored by the routing fabric-te would give it.

Public: `advise.advise`, `advise.score_many`, `advise.Request`, `advise.Score`.
"""
