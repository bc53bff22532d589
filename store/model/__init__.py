"""The model layer: Execution (Runs, Attempts as ownership epochs) and Goals, on the journal.

Modules: ``execution`` (the Execution API), ``run`` and ``run_rules`` (the Run record, its
invariants and field rules), ``goal`` (the Goal record and rules), ``goals`` (the Goals API).
Imports only ``store.journal`` and the base modules (``errors``, ``canonical``, ``records``).
"""

# The public surface: these modules (other packages import from them, never from a
# private ``_name``).
__all__ = ["execution", "goal", "goals", "run", "run_rules"]
