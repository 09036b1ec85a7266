"""`ddpify verify`: prove a migration by running the original and the migrated script.

probe.py records what a script does (its hooks and helpers in probing/), runner.py
launches the runs, named in run_set.py, the checks package judges the recordings (one
module per check), report.py prints the verdict, session.py ties them together and
command.py is the command line. Nothing here is imported by the migration itself.
"""
