"""Read-only facts about one module, gathered in one traversal (reading.analyse).

The rules never re-derive these facts: they plan edits keyed by the very nodes this
package recorded, and one transformer applies them (emit/edits.py). Modules, bottom up:
nodes (readers of single nodes), facts (the record), navigation, values, control (queries
over the record, each class extending the one below), collector (the traversal),
figures (what an evaluation computes).
"""
