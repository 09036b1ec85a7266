"""Which values choose a device, and how: CUDA or the CPU, any accelerator, the script's own
"use the GPU?" test. Read for each assignment by the collector (collector.py)."""
from typing import Callable, Optional

import libcst as cst

from ddpify.analysis import names, traversal
from ddpify.analysis.nodes import positional_args, positional_parameters, string_value


class DeviceValues:
    def __init__(self, module: cst.Module, calls: Callable[[cst.Call, str], bool]) -> None:
        self.module = module
        # Whether a call calls the API of this qualified name (the collector's import table).
        self.calls = calls

    def gpu_condition(self, value: cst.BaseExpression) -> Optional[str]:
        if isinstance(value, cst.Call) and self.calls(value, names.TORCH_DEVICE):
            arguments = positional_args(value)
            if len(value.args) != 1 or len(arguments) != 1:
                return None
            return self.gpu_condition(arguments[0])
        if isinstance(value, cst.IfExp) and self.names_gpu(value.orelse) and self.names_cpu(value.body):
            # `"cpu" if args.cpu or not torch.cuda.is_available() else "cuda"`: the GPU when the
            # test fails, so the script's own `--cpu` flag keeps choosing the CPU.
            return self._negated(value.test)
        if not isinstance(value, cst.IfExp) or not self.names_gpu(value.body):
            return None
        test = value.test
        if isinstance(test, cst.Call) and self.calls(test, names.CUDA_IS_AVAILABLE):
            return None
        return self.module.code_for_node(test)

    def names_cpu(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Call) and self.calls(value, names.TORCH_DEVICE):
            return len(value.args) == 1 and self.names_cpu(value.args[0].value)
        return string_value(value) == "cpu"

    def _negated(self, test: cst.BaseExpression) -> Optional[str]:
        """The code of `not test`; None where that is `torch.cuda.is_available()` itself."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = test.expression
            if isinstance(inner, cst.Call) and self.calls(inner, names.CUDA_IS_AVAILABLE):
                return None
            return self.module.code_for_node(inner)
        code = self.module.code_for_node(test)
        simple = isinstance(test, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not test.lpar
        return f"not {code}" if simple else f"not ({code})"

    def names_gpu(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Call) and self.calls(value, names.TORCH_DEVICE):
            return bool(value.args) and self.names_gpu(value.args[0].value)
        text = string_value(value)
        return text is not None and (text == "cuda" or text.startswith("cuda:"))

    def cuda_or_cpu(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.IfExp):
            return self.cuda_or_cpu(value.body) and self.cuda_or_cpu(value.orelse)
        if isinstance(value, cst.Call) and self.calls(value, names.TORCH_DEVICE):
            # Not `torch.device(args.device)`: the user may name any device type (mps, xpu),
            # so the choice is kept and only refined to this rank's index, never replaced.
            arguments = positional_args(value)
            return len(arguments) == 1 and self.cuda_or_cpu(arguments[0])
        text = string_value(value)
        if text is not None:
            return text in ("cuda", "cpu") or text.startswith("cuda:")
        return isinstance(value, cst.Integer)

    def is_accelerator(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.IfExp):
            return self.is_accelerator(value.body) or self.is_accelerator(value.orelse)
        return isinstance(value, cst.Call) and self.calls(value, names.CURRENT_ACCELERATOR)

    def is_device_value(self, value: cst.BaseExpression, target: str) -> bool:
        if isinstance(value, cst.Call):
            return self.calls(value, names.TORCH_DEVICE) or self.calls(
                value, names.CURRENT_ACCELERATOR
            )
        if isinstance(value, cst.IfExp):
            return self.is_device_value(value.body, target) or self.is_device_value(
                value.orelse, target
            )
        text = string_value(value)
        if text is not None:
            return text in ("cuda", "cpu") or text.startswith("cuda:")
        return isinstance(value, cst.Integer) and "device" in target.lower()


def moves_itself(class_def: cst.ClassDef) -> bool:
    """Its `__init__` moves the object, or its parts one by one, in place (`self.to(device)`,
    `self.cuda()`, `self.encoder.cuda(); self.decoder.cuda()`, under a test or not) or as it
    stores them (`self.backbone = backbone.to(device)`): each object
    of the class is made on its device, as by `Net().to(device)`, and is wrapped with this
    rank's device_ids (effects._moves_itself reads a class of another module the same way)."""
    init = next((statement for statement in class_def.body.body
                 if isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__"), None)
    if init is None:
        return False
    receiver = (positional_parameters(init) or ["self"])[0]
    found = False

    class _Moves(cst.CSTVisitor):
        def visit_Expr(self, statement: cst.Expr) -> None:
            nonlocal found
            call = statement.value
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                    and call.func.attr.value in ("to", "cuda")):
                return
            moved = call.func.value
            while isinstance(moved, cst.Attribute):
                moved = moved.value
            found = found or isinstance(moved, cst.Name) and moved.value == receiver

        def visit_Assign(self, statement: cst.Assign) -> None:
            # `self.backbone = backbone.to(device)`, `self.head = nn.Linear(32, 2).cuda()`: a
            # part stored already on its device.
            nonlocal found
            value = statement.value
            if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                    and value.func.attr.value in ("to", "cuda")) or _moves_to_the_cpu(value):
                return
            found = found or any(isinstance(target.target, cst.Attribute) and isinstance(target.target.value, cst.Name)
                                 and target.target.value.value == receiver for target in statement.targets)

        def visit_FunctionDef(self, inner: cst.FunctionDef) -> bool:
            return inner is init

    traversal.visit(init, _Moves())
    return found


def _moves_to_the_cpu(call: cst.Call) -> bool:
    """`x.to("cpu")`, `x.to(device="cpu")`."""
    arguments = [arg for arg in call.args if arg.keyword is None or arg.keyword.value == "device"]
    return bool(arguments) and isinstance(arguments[0].value, cst.SimpleString) \
        and "cpu" in arguments[0].value.value
