"""The applied state of a scale keeps what the plan kept known: the surviving nodes as planned (a node
repaired meanwhile shows at the next refresh), the added ones as the API answered."""

from __future__ import annotations

from provider.cty import UNKNOWN
from provider.resources.cluster_plan import keep_planned_elements


def test_keep_planned_elements_takes_known_elements_from_the_plan_and_unknown_ones_from_the_api():
    planned = {"nodes": [{"name": "a", "status": "RUNNING"}, UNKNOWN], "login": {"host": "j"},
               "slurm": UNKNOWN}
    applied = {"nodes": [{"name": "a", "status": "REPAIRING"}, {"name": "b", "status": "RUNNING"}],
               "login": {"host": "j2"}, "slurm": {"controller": "j"}}
    kept = keep_planned_elements(dict(applied), planned, ("nodes", "login", "slurm"))
    assert kept == {"nodes": [{"name": "a", "status": "RUNNING"}, {"name": "b", "status": "RUNNING"}],
                    "login": {"host": "j"}, "slurm": {"controller": "j"}}


def test_keep_planned_elements_leaves_a_list_of_another_length_as_answered():
    planned = {"nodes": [{"name": "a"}, UNKNOWN]}
    applied = {"nodes": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}
    assert keep_planned_elements(dict(applied), planned, ("nodes",)) == applied
