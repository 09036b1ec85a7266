"""python -m ddpify.verify train.py [-o train_ddp.py] ..."""
from ddpify.verify.command import verify_command

verify_command(prog_name="python -m ddpify.verify")
