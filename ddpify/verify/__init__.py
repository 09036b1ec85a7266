"""`ddpify verify`: prove a migration by running the original and the migrated script.

probe.py records what a script does, runner.py launches the runs, checks.py judges the
recordings, report.py prints the verdict, session.py ties them together and command.py is
the command line. Nothing here is imported by the migration itself.
"""
