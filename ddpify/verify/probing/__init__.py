"""The parts of the probe that records a training script (ddpify/verify/probe.py).

probe.py is the entry point (`python -m ddpify.verify.probe`) and the Probe that holds a
run's state and turns what the hooks see into events; the hooks on torch, the event
writers, and the helpers that place files and script lines are here. All of it runs inside
the user's script's process, so none of it may import the migration.
"""
