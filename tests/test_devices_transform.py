"""Edge cases of devices.py: every way to name one fixed GPU, and the script's own GPU test."""
from ddpify.api import migrate_source

TRAIN = """\
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)))
for epoch in range(2):
    for (batch,) in loader:
        loss = model(x).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def migrate(code: str):
    result = migrate_source("import torch\n" + code + TRAIN)
    return result.code, {d.code for d in result.diagnostics}


def test_cuda_with_index_and_keywords_becomes_to_device():
    code, _ = migrate("model = torch.nn.Linear(2, 1).cuda(1)\nx = torch.ones(2).cuda(0, non_blocking=True)\n")
    assert "torch.nn.Linear(2, 1).to(device)" in code
    assert "torch.ones(2).to(device, non_blocking=True)" in code


def test_integer_and_string_devices_become_the_rank_device():
    code, _ = migrate('model = torch.nn.Linear(2, 1).to(0)\nx = torch.ones(2).to("cuda:0", torch.float64)\n')
    assert "torch.nn.Linear(2, 1).to(device)" in code
    assert "torch.ones(2).to(device, torch.float64)" in code


def test_fixed_set_device_is_removed():
    code, _ = migrate("torch.cuda.set_device(0)\nmodel = torch.nn.Linear(2, 1).cuda()\nx = torch.ones(2)\n")
    assert "torch.cuda.set_device(0)" not in code
    assert "torch.cuda.set_device(local_rank)" in code


def test_visible_devices_assignment_is_reported():
    _, codes = migrate('import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "0"\n'
                       "model = torch.nn.Linear(2, 1).cuda()\nx = torch.ones(2)\n")
    assert "DDP004" in codes


def test_use_cuda_flag_is_kept():
    code, _ = migrate(
        "use_cuda = not no_cuda and torch.cuda.is_available()\n"
        'device = torch.device("cuda" if use_cuda else "cpu")\n'
        "model = torch.nn.Linear(2, 1).to(device)\nx = torch.ones(2)\n"
    )
    assert 'device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")' in code
    assert 'dist.init_process_group("nccl" if use_cuda else "gloo")' in code


def test_device_from_a_flag_keeps_its_type():
    """`--device mps` or `xpu` stays that device: the setup only gives it this rank's index."""
    code, _ = migrate(
        "device = torch.device(args.device)\nmodel = torch.nn.Linear(2, 1).to(device)\nx = torch.ones(2)\n"
    )
    assert code.count("torch.device(args.device)") == 1
    assert "use_cuda" not in code and 'torch.device("cpu")' not in code
    assert "device = torch.device(device.type, local_rank)" in code
    assert "dist.init_process_group(dist.get_default_backend_for_device(device))" in code


def test_is_available_condition_is_unchanged():
    code, _ = migrate(
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
        "model = torch.nn.Linear(2, 1).to(device)\nx = torch.ones(2)\n"
    )
    assert "use_cuda" not in code
    assert "if torch.cuda.is_available():\n    torch.cuda.set_device(local_rank)" in code


def test_string_device_choice_stays_a_string_under_torchrun_too():
    """autocast(device_type=device) and device.startswith(...) need the string: "cuda" is
    made this rank's GPU by set_device_index, not by a torch.device with an index."""
    code, codes = migrate(
        'device = "cuda" if torch.cuda.is_available() else "cpu"\n'
        "model = torch.nn.Linear(2, 1).to(device)\nx = torch.ones(2)\n"
    )
    assert 'device = "cuda" if torch.cuda.is_available() else "cpu"\n' in code
    assert "torch.device(device)" not in code
    assert "        torch.accelerator.set_device_index(local_rank)\n" in code
    assert 'device_ids=[local_rank] if device == "cuda" else None' in code


def test_current_accelerator_choice_is_kept():
    code, codes = migrate(
        "device = torch.accelerator.current_accelerator()\n"
        "model = torch.nn.Linear(2, 1).to(device)\nx = torch.ones(2)\n"
    )
    assert "DDP006" not in codes
    assert "device = torch.accelerator.current_accelerator()\n" in code
    assert "torch.accelerator.set_device_index(local_rank)" in code
    assert "dist.init_process_group(dist.get_default_backend_for_device(device))" in code


def test_a_device_of_a_global_config_read_in_the_training_function_is_refined_there():
    # `args` is set when the module runs, before train() is called: the setup opens train()
    # and this rank's accelerator takes the string the command line gave, not Gloo on GPU 0.
    source = (
        "import argparse\nimport torch\n"
        "parser = argparse.ArgumentParser()\n"
        'parser.add_argument("--device", default="cuda")\n'
        "args = parser.parse_args()\n"
        "def train():\n"
        "    model = torch.nn.Linear(2, 1).to(args.device)\n"
        + "".join("    " + line + "\n" for line in TRAIN.splitlines())
        + "train()\n"
    )
    code = migrate_source(source).code
    assert "dist.init_process_group(dist.get_default_backend_for_device(args.device))" in code
    assert 'init_process_group("gloo")' not in code


def test_a_device_from_a_config_dict_handed_to_main_is_refined_there():
    source = (
        "import torch\n"
        'CONFIG = {"device": "cuda" if torch.cuda.is_available() else "cpu"}\n'
        "def main(cfg):\n"
        '    model = torch.nn.Linear(2, 1).to(cfg["device"])\n'
        + "".join("    " + line + "\n" for line in TRAIN.splitlines())
        + 'if __name__ == "__main__":\n    main(CONFIG)\n'
    )
    code = migrate_source(source).code
    assert 'dist.init_process_group(dist.get_default_backend_for_device(cfg["device"]))' in code
    assert 'torch.device(cfg["device"]).type == "cuda"' in code
