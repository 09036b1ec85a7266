"""`ddpify launch`: the files that start a migrated script on a cluster.

templates.py renders them (a torchrun script, a SLURM batch script, a Kubeflow PyTorchJob
manifest) from one set of choices and does no I/O; command.py is the command line, which
writes them next to the script. Nothing here is imported by the migration itself.
"""
