"""Losses over in-batch negatives (CLIP, InfoNCE, NT-Xent): a rank sees only its shard.

A contrastive loss scores each sample against every other sample of its batch: its value is
not a mean of per-sample terms, so under DDP each rank's loss sees batch_size - 1 negatives
where one process on the global batch saw batch_size x world_size - 1. An expert gathers the
embeddings from every rank, with their gradient, before the similarity (open_clip's
gather_features, SimCLR's GatherLayer). Where the shape is certain ddpify does the same
(DDP410); elsewhere it says where and how (DDP206, at the loss).
"""
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import libcst as cst

from ddpify.analysis import traversal
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Statement
from ddpify.analysis.nodes import dotted_name, find_all, names_in, string_value
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion
from ddpify.plan import Plan
from ddpify.rules import training
from ddpify.rules.cases import Emits, Silent

RULES = (
    Rule("DDP410", Severity.EDIT, "in-batch negatives gathered from every rank, with their gradient",
         "The loss scores each embedding against every other one of the batch (a similarity "
         "matrix with the matching pair on its diagonal). Under DDP a rank's batch is its "
         "shard, so each rank would contrast against its own samples only. The two embeddings "
         "are gathered from every rank just before the similarity (the gradient flows back "
         "to each rank's own rows), so every rank computes the one-process loss over the "
         "global batch, and DDP's averaged gradient is that loss's gradient.",
         "Nothing to do."),
)

CROSS_ENTROPY = "torch.nn.functional.cross_entropy"
CROSS_ENTROPY_CLASS = "torch.nn.CrossEntropyLoss"
SIMILARITIES = ("torch.matmul", "torch.mm", "torch.einsum", "torch.nn.functional.cosine_similarity", "torch.bmm")
IN_BATCH_LABELS = ("torch.arange", "torch.zeros", "torch.eye")
ARANGE = "torch.arange"
CAT = "torch.cat"
CDIST = "torch.cdist"
EINSUM = "torch.einsum"
COSINE = "torch.nn.functional.cosine_similarity"
PLACEMENTS = frozenset({"to", "cuda", "long", "float", "contiguous"})
BUILTINS = frozenset({"float", "int", "len", "bool"})
# tensor factories and how many of their leading positional arguments are sizes
FACTORIES = {"torch.arange": 3, "torch.eye": 2, "torch.zeros": 3, "torch.ones": 3, "torch.empty": 3, "torch.full": 1}
NORMALIZE = "torch.nn.functional.normalize"
TRANSPOSES = frozenset({"T", "mT"})

GATHER_COMMENT = "# In-batch negatives from every rank: the loss is the one-process loss over the global batch."
GATHER_HELPER = '''\


class GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward hands each rank the gradient of its own rows, summed over the
    ranks (each rank's loss reads every rank's rows)."""

    @staticmethod
    def forward(ctx, tensor):
        rows = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(rows, tensor.contiguous())
        return torch.cat(rows)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad.chunk(dist.get_world_size())[dist.get_rank()]


def gather_with_grad(tensor):
    """Every rank's rows of `tensor`, in rank order, for a loss over in-batch negatives."""
    if not dist.is_initialized():
        return tensor
    return GatherWithGrad.apply(tensor)
'''


@dataclass
class Contrast:
    loss: cst.Call
    logits: cst.BaseExpression
    labels: cst.BaseExpression


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: a cross-entropy whose logits come from a similarity of tensors (`a @ b.T`,
    torch.matmul/mm/einsum, cosine_similarity) and whose labels come from torch.arange (or
    torch.zeros, the positive in column 0) is a loss over in-batch negatives. Where the
    gather is certain (_gather_point), the two embeddings are gathered just before the
    similarity; elsewhere DDP206 names the loss and the fix."""
    if not facts.models:
        return
    reported: set[Statement] = set()
    contrasts = _contrasts(facts)
    _report_pairwise(facts, edits, contrasts)
    _report_queues(facts, edits)
    for contrast in contrasts:
        statement = facts.statement_of(contrast.loss)
        if statement in reported:
            continue
        reported.add(statement)
        point = _gather_point(facts, contrast)
        if not isinstance(point, str):
            for gather in point:
                if gather.similarity in reported:
                    continue
                reported.add(gather.similarity)
                gathered = ", ".join(f"gather_with_grad({name})" for name in gather.names)
                edits.insert_before(gather.similarity, Insertion(edits.statements(
                    f"{GATHER_COMMENT}\n{', '.join(gather.names)} = {gathered}\n")))
                edits.add_helper("gather_with_grad", GATHER_HELPER, "dist", "torch")
                edits.report("DDP410", gather.similarity)
            continue
        edits.report("DDP206", contrast.loss, (
            "in-batch negatives: under DDP this loss scores each sample against its own rank's shard only, "
            f"not the global batch (ddpify gathers only where it is certain, and here {point}); to keep the "
            "global batch's negatives, gather the embeddings from every rank with their gradient "
            "(`torch.cat(torch.distributed.nn.functional.all_gather(z))`) before the similarity (two views "
            "concatenated, as NT-Xent does: each view before the concatenation, so each row's positive stays "
            "N rows away) and size the labels and masks by the gathered batch (or offset them by rank x local "
            "batch when only the keys are gathered, as open_clip's gather_features with local_loss does)"))


def _report_pairwise(facts: Facts, edits: Edits, contrasts: list[Contrast]) -> None:
    """Rule: a similarity or distance of every embedding of the batch with every other one
    (`torch.cdist(emb, emb)`, `f @ f.T`, `torch.matmul(f, f.T)`) of this batch's embeddings,
    in a training loop's body or in a loss function (or loss module) called there with them,
    feeds a loss whose positives and negatives are the batch (SupCon's label mask, batch-hard
    triplet mining) when no cross-entropy over it was found (those are DDP410's). Under DDP
    each rank mines its own shard: reported (DDP206) with the fix, never rewritten, since
    the labels must be gathered alongside and the mining's shape varies."""
    scopes = {(facts.function_of(contrast.loss), _innermost(facts, contrast.loss)) for contrast in contrasts}
    shown: set[Statement] = set()
    for node in [*facts.calls_named.get(CDIST, ()), *facts.calls_named.get("torch.matmul", ()),
                 *facts.calls_named.get("torch.mm", ()), *facts.nodes_of(cst.BinaryOperation)]:
        operands = _pair(facts, node)
        statement = facts.statement_of(node)
        if operands is None or statement in shown \
                or (facts.function_of(node), _innermost(facts, node)) in scopes \
                or not _of_the_training_batch(facts, node, operands):
            continue
        shown.add(statement)
        edits.report("DDP206", node, (
            "pairwise similarities of the batch's embeddings (positives and negatives mined in the batch): "
            "under DDP each rank compares its own shard only; to keep the global batch, gather the "
            "embeddings with their gradient and their labels from every rank before "
            f"`{cst.Module([]).code_for_node(node)}` (as a GatherLayer does; two views concatenated: each view "
            "before the concatenation), or accept per-rank mining"))


def _innermost(facts: Facts, node: cst.CSTNode) -> Optional[cst.For]:
    loops = facts.enclosing_loops(node)
    return loops[0] if loops else None


def _pair(facts: Facts, node: cst.CSTNode) -> Optional[tuple[str, str]]:
    """(a, b) of `torch.cdist(a, b)`, `a @ b.T`, `torch.matmul(a, b.t())`, names each."""
    if isinstance(node, cst.BinaryOperation):
        if not isinstance(node.operator, cst.MatrixMultiply):
            return None
        left, right = node.left, node.right
    elif isinstance(node, cst.Call) and len(node.args) >= 2 and all(arg.keyword is None for arg in node.args[:2]):
        left, right = node.args[0].value, node.args[1].value
        if node in facts.calls_named.get(CDIST, ()):  # every row of a with every row of b, as they are
            return (left.value, right.value) if isinstance(left, cst.Name) and isinstance(right, cst.Name) else None
    else:
        return None
    if isinstance(right, cst.Call) and isinstance(right.func, cst.Attribute) \
            and right.func.attr.value == "contiguous" and not right.args:
        right = right.func.value  # `out.t().contiguous()`
    transposed = _untransposed(right)
    if transposed is right or not isinstance(left, cst.Name) or not isinstance(transposed, cst.Name):
        return None
    return left.value, transposed.value


def _views_of_this_batch(facts: Facts, loop: cst.For, name: str, node: cst.CSTNode) -> bool:
    """`name` is this batch's embeddings, or assigned once in the loop's body the concatenation
    of two of them (`out = torch.cat([out_1, out_2])`, SimCLR's two views)."""
    if _embedding_of_this_batch(facts, loop, name, node):
        return True
    assigns = [assign for assign in facts.nodes_of(cst.Assign) if facts.function_of(assign) is facts.function_of(node)
               and name in _bound(assign) and facts.ancestor_in(assign, loop.body) is not None]
    parts = _concatenated(facts, assigns[0].value) if len(assigns) == 1 else None
    return parts is not None and facts.start_of(assigns[0]) < facts.start_of(node) \
        and all(_embedding_of_this_batch(facts, loop, part, assigns[0]) for part in parts)


def _of_the_training_batch(facts: Facts, node: cst.CSTNode, operands: tuple[str, str]) -> bool:
    """Both operands are this batch's embeddings: made from the model's forward in the body of
    the training loop around `node`, or handed, as the parameters they are, to a function
    (or a loss module's forward) called in a training loop with such embeddings."""
    loop = _innermost(facts, node)
    if loop is not None:
        return loop in training.batch_loops(facts) and all(
            _views_of_this_batch(facts, loop, name, node) for name in operands)
    scope = facts.function_of(node)
    if scope is None:
        return False
    owner = facts.class_of(scope)
    if owner is not None and scope.name.value != "forward":
        return False
    parameters = [parameter.name.value for parameter in scope.params.params][1 if owner is not None else 0:]
    if not set(operands) <= set(parameters):
        return False
    positions = [parameters.index(name) for name in operands]
    for call in (_instance_calls(facts, owner) if owner is not None else facts.calls_of(scope)):
        loop = _innermost(facts, call)
        arguments = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
        if loop is None or loop not in training.batch_loops(facts) or max(positions) >= len(arguments):
            continue
        handed = [arguments[position] for position in positions]
        if all(isinstance(each, cst.Name) and _embedding_of_this_batch(facts, loop, each.value, call)
               for each in handed):
            return True
    return False


def _report_queues(facts: Facts, edits: Edits) -> None:
    """Rule: a ring buffer of keys (MoCo's queue) filled from this batch: a write into a slice
    of an attribute of the instance whose bounds read a pointer (`self.queue[:, ptr:ptr + n] =
    keys.T`), of a value that reads a parameter of the method. Under DDP each rank would
    enqueue its own keys only (and DDP's buffer broadcast keeps rank 0's): the queue holds half
    the keys, older. Reported (DDP406) with the fix MoCo's own DDP code uses."""
    for assign in facts.nodes_of(cst.Assign):
        scope = facts.function_of(assign)
        if scope is None or facts.class_of(scope) is None or len(assign.targets) != 1:
            continue
        target = assign.targets[0].target
        if not (isinstance(target, cst.Subscript) and (dotted_name(target.value) or "").startswith("self.")):
            continue
        pointers = [names_in(element.slice.lower) & names_in(element.slice.upper) for element in target.slice
                    if isinstance(element.slice, cst.Slice) and element.slice.lower is not None
                    and element.slice.upper is not None]
        parameters = {parameter.name.value for parameter in scope.params.params[1:]}
        if not any(pointers) or not names_in(assign.value) & parameters:
            continue
        edits.report("DDP406", assign, (
            f"a queue of keys is filled from this rank's batch only (`{dotted_name(target.value)}`): gather "
            "the keys from every rank before the enqueue (MoCo's concat_all_gather: dist.all_gather, no "
            "gradient needed), advance the pointer by the gathered size, and keep the queue's length "
            "divisible by the global batch"))


@dataclass
class _Gather:
    similarity: Statement
    names: list[str]


def _contrasts(facts: Facts) -> list[Contrast]:
    criteria = {dotted_name(target.target) for call in facts.calls_named.get(CROSS_ENTROPY_CLASS, ())
                for assign in [facts.parents.get(call)] if isinstance(assign, cst.Assign)
                for target in assign.targets}
    losses = list(facts.calls_named.get(CROSS_ENTROPY, ()))
    losses += [call for name in criteria if name for call in facts.calls_by_callee.get(name, ())]
    similarity_calls = {call for qualified in SIMILARITIES for call in facts.calls_named.get(qualified, ())}
    torch_calls = {call for qualified, calls in facts.calls_named.items() if qualified.startswith("torch.")
                   for call in calls}
    label_calls = {call for qualified in IN_BATCH_LABELS for call in facts.calls_named.get(qualified, ())}
    found = []
    for loss in sorted(losses, key=facts.start_of):
        arguments = [arg.value for arg in loss.args if arg.keyword is None and not arg.star]
        if len(arguments) < 2:
            continue
        logits, labels = arguments[:2]
        scope = facts.function_of(loss)
        if _derives(facts, logits, scope, loss, lambda node: _similarity(node, similarity_calls, torch_calls)) \
                and _derives(facts, labels, scope, loss, lambda node: node in label_calls):
            found.append(Contrast(loss, logits, labels))
    return found


def _similarity(node: cst.CSTNode, similarity_calls: set[cst.Call], torch_calls: set[cst.Call]) -> bool:
    """A similarity of this batch's tensors: `a @ b.T` or a similarity call whose operands
    read no attribute (a memory bank or a queue, `bank.feats`, `self.queue`, holds other
    batches' samples: its negatives do not shrink with the shard)."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        left = node.left.right if isinstance(node.left, cst.BinaryOperation) \
            and isinstance(node.left.operator, cst.Multiply) else node.left
        operands: list[cst.CSTNode] = [left, node.right]
    elif isinstance(node, cst.Call) and node in similarity_calls:
        operands = [arg.value for arg in node.args]
    else:
        return False
    return not any(_reads_state(operand, torch_calls) for operand in operands)


def _reads_state(operand: cst.CSTNode, torch_calls: set[cst.Call]) -> bool:
    """The operand reads an attribute other than a transpose, a method it calls, or a torch
    function's path (`F.normalize`)."""
    paths = {id(attribute) for call in find_all(operand, cst.Call) if call in torch_calls
             for attribute in find_all(call.func, cst.Attribute)}
    methods = {id(call.func) for call in find_all(operand, cst.Call)}
    return any(id(attribute) not in paths | methods and attribute.attr.value not in TRANSPOSES
               for attribute in find_all(operand, cst.Attribute))


def _derives(facts: Facts, value: cst.BaseExpression, scope: Optional[cst.FunctionDef], before: cst.CSTNode,
             test, hops: int = 4) -> bool:
    """The value holds a node that passes `test`, or reads a name of its scope assigned one
    above `before` (a few assignments back)."""
    if any(test(node) for node in [*find_all(value, cst.BinaryOperation), *find_all(value, cst.Call)]):
        return True
    if hops == 0:
        return False
    return any(_derives(facts, assign.value, scope, assign, test, hops - 1)
               for name in names_in(value) for assign in [_assignment(facts, name, scope, before)]
               if assign is not None)


def _assignment(facts: Facts, name: str, scope: Optional[cst.FunctionDef], before: cst.CSTNode
                ) -> Optional[cst.Assign]:
    """The last assignment of `name` in `scope` above `before`."""
    found = [assign for assign in facts.nodes_of(cst.Assign)
             if facts.function_of(assign) is scope and facts.start_of(assign) < facts.start_of(before)
             and name in _bound(assign)]
    return max(found, key=facts.start_of, default=None)


def _bound(assign: cst.Assign) -> set[str]:
    bound: set[str] = set()
    for target in assign.targets:
        elements = target.target.elements if isinstance(target.target, (cst.Tuple, cst.List)) \
            else [cst.Element(target.target)]
        bound.update(element.value.value for element in elements if isinstance(element.value, cst.Name))
    return bound


def _gather_point(facts: Facts, contrast: Contrast) -> "list[_Gather] | str":
    """Rule: the gather is certain when, in a training batch loop's own body, (1) the logits
    are a name assigned `a @ b.T` (or `torch.matmul(a, b.t())`, `torch.mm`, scaled or not),
    (2) a and b are names that this loop body assigns from a forward of the model (the
    batch's embeddings, one row per sample), (3) the labels are `torch.arange(n)` with n the
    size of the logits, a or b (so they follow the gathered batch), and (4) nothing after the
    similarity reads a or b but the labels' size. The same holds for a loss function of the
    module (`def clip_loss(a, b): ...`), or the forward of a loss module's class (`criterion =
    ClipLoss()`), whose similarity is of two of its parameters, never rebound: the gather goes
    before each call of it in a training loop, on the embeddings handed in, when every such
    call is certain. Otherwise the reason it is not."""
    loops = facts.enclosing_loops(contrast.loss)
    scope = facts.function_of(contrast.loss)
    if loops and loops[0] in training.batch_loops(facts):
        loop = loops[0]
        found = _block_contrast(facts, contrast, loop.body)
        if isinstance(found, str):
            return found
        similarity, names = found
        if not all(_embedding_of_this_batch(facts, loop, name, similarity) for name in names):
            return "the similarity's operands are not this batch's embeddings from the model's forward"
        return [_Gather(similarity, names)]
    owner = facts.class_of(scope)
    if loops or scope is None or owner is not None and scope.name.value != "forward":
        return "the loss is computed outside the training loop's body"
    found = _block_contrast(facts, contrast, scope.body)
    if isinstance(found, str):
        return found
    similarity, names = found
    parameters = [parameter.name.value for parameter in scope.params.params][1 if owner is not None else 0:]
    before = list(scope.body.body)[:list(scope.body.body).index(similarity)]
    if not set(names) <= set(parameters) or any(set(names) & _bound(assign) for assign in facts.nodes_of(cst.Assign)
                                                if facts.function_of(assign) is scope) \
            or any(set(names) & names_in(statement) for statement in before):
        return "the similarity is not of the loss function's own parameters"
    gathers = []
    for call in (_instance_calls(facts, owner) if owner is not None else facts.calls_of(scope)):
        call_loops = facts.enclosing_loops(call)
        if not call_loops or call_loops[0] not in training.batch_loops(facts):
            continue
        gather = _call_site(facts, call, call_loops[0], [parameters.index(name) for name in names])
        if gather is None:
            return f"its call on line {facts.line_of(call)} is not handed this batch's embeddings alone"
        gathers.append(gather)
    return gathers or "the loss function is not called in a training loop"


def _instance_calls(facts: Facts, owner: cst.ClassDef) -> list[cst.Call]:
    """The calls of the loss module's instances (`criterion = ClipLoss()`, `criterion(a, b)`),
    which run its forward."""
    instances = {dotted_name(target.target) for assign in facts.nodes_of(cst.Assign)
                 if isinstance(assign.value, cst.Call) and dotted_name(assign.value.func) == owner.name.value
                 for target in assign.targets}
    return [call for name in instances if name for call in facts.calls_by_callee.get(name, ())]


def _block_contrast(facts: Facts, contrast: Contrast, block: cst.BaseSuite) -> "tuple[Statement, list[str]] | str":
    """The similarity statement and its two operands, where the block's own statements make
    the similarity, then the labels, and read the operands after it for their size only."""
    scope = facts.function_of(contrast.loss)
    logits = _base(contrast.logits)
    if not isinstance(logits, cst.Name):
        return "the similarity is not assigned to a name"
    similarity_assign = _assignment(facts, logits.value, scope, contrast.loss)
    while similarity_assign is not None and _operands(facts, similarity_assign.value) is None \
            and logits.value in names_in(similarity_assign.value):
        # `sim = sim.masked_fill(mask, -inf)`, `logits = logits / t`: the similarity is made above
        similarity_assign = _assignment(facts, logits.value, scope, similarity_assign)
    body = list(block.body)
    if similarity_assign is None or facts.statement_of(similarity_assign) not in body:
        return "the similarity is not made beside the loss, in the same block"
    similarity = facts.statement_of(similarity_assign)
    operands = _operands(facts, similarity_assign.value)
    if operands is None:
        return "the similarity is not `a @ b.T` of two embeddings"
    names = list(dict.fromkeys(operands))
    if len(names) == 1:
        return _views_contrast(facts, contrast, body, similarity, names[0])
    labels = contrast.labels
    if isinstance(labels, cst.Name):
        labels_assign = _assignment(facts, labels.value, scope, contrast.loss)
        if labels_assign is None or facts.statement_of(labels_assign) not in body \
                or facts.start_of(labels_assign) < facts.start_of(similarity_assign):
            return "the labels are not made after the similarity, beside it"
        labels = labels_assign.value
    sized_by = {similarity_assign.targets[0].target.value, *names} \
        if isinstance(similarity_assign.targets[0].target, cst.Name) else set(names)
    aranges = [call for call in find_all(labels, cst.Call) if call in facts.calls_named.get(ARANGE, ())]
    if len(aranges) != 1 or not aranges[0].args or not _size_of(aranges[0].args[0].value, sized_by) \
            or _placed(labels) is not aranges[0]:
        return "the labels are not `torch.arange` of the similarity's own size"
    problem = _read_again(body[body.index(similarity) + 1:], names)
    return problem if problem is not None else (similarity, names)


def _placed(node: cst.BaseExpression) -> cst.BaseExpression:
    """`torch.arange(n)` of `torch.arange(n).to(device)`, `.long()`, `.cuda()`: the labels on
    the diagonal, each row's positive its own column (arithmetic on them moves it)."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
            and node.func.attr.value in PLACEMENTS:
        node = node.func.value
    return node


def _views_contrast(facts: Facts, contrast: Contrast, body: list[cst.CSTNode], similarity: Statement,
                    name: str) -> "tuple[Statement, list[str]] | str":
    """NT-Xent (SimCLR): the similarity of one tensor with itself, `z = torch.cat([z_i, z_j])`,
    each row's positive N rows away. Gathering `z` would put the ranks' rows between a view and
    its pair (rank 0's z_i, rank 0's z_j, rank 1's z_i, ...), so the two views are gathered,
    each, before the concatenation, which then holds every rank's first views and then every
    rank's second views, as one process's batch would. The certain shape: the concatenation
    is made in the block, once, above the similarity, of two names along the rows, and every
    statement from it to the loss reads only what it and the similarity made, the sizes of
    those, constants, torch functions and a device (so labels and masks follow the gathered
    batch: `n = z_i.shape[0]`, `torch.arange(n, 2 * n)`, never a configured batch size)."""
    scope = facts.function_of(contrast.loss)
    concat_assign = _assignment(facts, name, scope, similarity)
    if concat_assign is None or facts.statement_of(concat_assign) not in body:
        return f"`{name}` is compared with itself but is not made beside the similarity"
    parts = _concatenated(facts, concat_assign.value)
    if parts is None:
        return (f"`{name}` is compared with itself but is not the concatenation of two views "
                "(`torch.cat([z_i, z_j])`) made beside it")
    concat = facts.statement_of(concat_assign)
    loss = facts.statement_of(contrast.loss)
    if loss not in body:
        return "the loss is not computed in the block of the similarity"
    start, end = body.index(concat), body.index(loss)
    made = {*parts, *_bound(concat_assign)}
    for statement in body[start + 1:end + 1]:
        read = _foreign_read(facts, statement, made, contrast.loss) or _fixed_size(facts, statement, made)
        if read is not None:
            return (f"`{read}` is read between the concatenation of the views and the loss: the labels and "
                    "masks must follow the gathered batch (sized by the views)")
        made |= {bound for assign in find_all(statement, cst.Assign) if names_in(assign.value) & made
                 for bound in _bound(assign)}
    problem = _read_again(body[body.index(similarity) + 1:], [*parts, name])
    return problem if problem is not None else (concat, parts)


def _concatenated(facts: Facts, value: cst.BaseExpression) -> Optional[list[str]]:
    """[a, b] of `torch.cat([a, b])`, `torch.cat((a, b), dim=0)`, row-wise normalized or not."""
    value = _normalized(facts, value)
    if not (isinstance(value, cst.Call) and value in facts.calls_named.get(CAT, ()) and value.args
            and value.args[0].keyword is None and isinstance(value.args[0].value, (cst.List, cst.Tuple))):
        return None
    dims = [arg.value for arg in value.args[1:]]
    if any(not (isinstance(dim, cst.Integer) and dim.value == "0") for dim in dims):
        return None
    parts = [element.value for element in value.args[0].value.elements]
    if len(parts) != 2 or not all(isinstance(part, cst.Name) for part in parts):
        return None
    names = [part.value for part in parts if isinstance(part, cst.Name)]
    return names if len(set(names)) == 2 else None


def _fixed_size(facts: Facts, statement: cst.CSTNode, made: set[str]) -> Optional[str]:
    """A tensor made with a size that reads nothing of the views (`torch.arange(16, 32)`,
    `torch.eye(2 * 16)`): it would not follow the gathered batch."""
    for qualified, sized in FACTORIES.items():
        for call in facts.calls_named.get(qualified, ()):
            if facts.ancestor_in(call, statement) is None:
                continue
            sizes = [arg.value for arg in call.args if arg.keyword is None][:sized]
            if any(not names_in(size) & made for size in sizes):
                return cst.Module([]).code_for_node(call)
    return None


def _foreign_read(facts: Facts, statement: cst.CSTNode, made: set[str], loss: cst.Call) -> Optional[str]:
    """The first value the statement reads that is none of `made`, a torch function, a
    builtin, a device or dtype (`.to(device)`, `device=`), or a scale (`sim / self.temperature`)."""
    free: set[int] = set()
    torch_calls = {call for qualified, calls in facts.calls_named.items() if qualified.startswith("torch.")
                   for call in calls}
    for call in find_all(statement, cst.Call):
        if call is loss or dotted_name(call.func) in BUILTINS or call in torch_calls:
            free |= _ids(call.func)
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in PLACEMENTS:
            free |= {each for arg in call.args for each in _ids(arg.value)}
        free |= {each for arg in call.args if arg.keyword is not None and arg.keyword.value in ("device", "dtype")
                 for each in _ids(arg.value)}
    for operation in find_all(statement, cst.BinaryOperation):
        if isinstance(operation.operator, (cst.Divide, cst.Multiply)) \
                and not find_all(operation.right, cst.Call) and not find_all(operation.right, cst.Subscript):
            free |= _ids(operation.right)
    for attribute in find_all(statement, cst.Attribute):
        if attribute.attr.value in ("device", "dtype"):
            free |= _ids(attribute)
        free.add(id(attribute.attr))
    targets = {id(node) for assign in find_all(statement, cst.Assign) for target in assign.targets
               for node in find_all(target.target, cst.Name) if not find_all(target.target, cst.Attribute)}
    for arg in find_all(statement, cst.Arg):
        if arg.keyword is not None:
            free.add(id(arg.keyword))
    for name in find_all(statement, cst.Name):
        if id(name) not in free and id(name) not in targets and name.value not in made:
            chains = [dotted for attribute in find_all(statement, cst.Attribute)
                      for dotted in [dotted_name(attribute)] if dotted and dotted.startswith(name.value + ".")]
            return max(chains, key=len, default=name.value)
    return None


def _ids(node: cst.CSTNode) -> set[int]:
    """The ids of the node and of every node within it."""
    found: set[int] = set()

    class _All(cst.CSTVisitor):
        def on_visit(self, child: cst.CSTNode) -> bool:
            found.add(id(child))
            return True

    node.visit(_All())
    return found


def _read_again(statements: Sequence[cst.CSTNode], names: list[str]) -> Optional[str]:
    for later in statements:
        read = names_in(later) & set(names)
        if read and not all(_size_of(node, set(names)) for node in _reads_of(later, read)):
            return f"`{sorted(read)[0]}` is read again after the similarity"
    return None


def _call_site(facts: Facts, call: cst.Call, loop: cst.For, positions: list[int]) -> Optional[_Gather]:
    """`loss = clip_loss(a, b)` in the loop's own body, handed this batch's embeddings at the
    parameters the similarity reads, which nothing after the call reads but for their size."""
    statement = facts.statement_of(call)
    body: list[cst.CSTNode] = list(loop.body.body)
    arguments = [arg.value for arg in call.args]
    if statement not in body or any(arg.keyword is not None or arg.star for arg in call.args) \
            or max(positions) >= len(arguments):
        return None
    names = [argument.value for argument in (arguments[position] for position in positions)
             if isinstance(argument, cst.Name)]
    if len(names) != len(positions) or not all(_embedding_of_this_batch(facts, loop, name, call) for name in names) \
            or _read_again(body[body.index(statement) + 1:], names) is not None:
        return None
    return _Gather(statement, list(dict.fromkeys(names)))


def _base(node: cst.BaseExpression) -> cst.BaseExpression:
    """`logits.T` / `logits.t()` -> `logits` (the symmetric loss of CLIP); `logits * scale`,
    `logits / t` -> `logits`."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Multiply, cst.Divide)) \
            and isinstance(node.left, cst.Name):
        return node.left
    return _untransposed(node)


def _untransposed(node: cst.BaseExpression) -> cst.BaseExpression:
    """`b` of `b.T`, `b.t()`; the node itself otherwise."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "t" \
            and not node.args:
        return node.func.value
    if isinstance(node, cst.Attribute) and node.attr.value in TRANSPOSES:
        return node.value
    return node


def _operands(facts: Facts, value: cst.BaseExpression) -> Optional[tuple[str, str]]:
    """(a, b) of `a @ b.T`, `scale * a @ b.T`, `torch.matmul(a, b.t())`, `torch.mm(a, b.T)`,
    under a scale, each side possibly normalized (`F.normalize(a, dim=-1)`)."""
    products = [node for node in [*find_all(value, cst.BinaryOperation), *find_all(value, cst.Call)]
                if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply)
                or node in facts.calls_named.get("torch.matmul", ()) or node in facts.calls_named.get("torch.mm", ())
                or node in facts.calls_named.get(EINSUM, ()) or node in facts.calls_named.get(COSINE, ())]
    if len(products) != 1:
        return None
    product = products[0]
    if isinstance(product, cst.Call) and product in facts.calls_named.get(EINSUM, ()):
        return _einsum_operands(facts, product)
    if isinstance(product, cst.Call) and product in facts.calls_named.get(COSINE, ()):
        return _cosine_operands(facts, product)
    if isinstance(product, cst.BinaryOperation):
        left, right = product.left, product.right
    else:
        assert isinstance(product, cst.Call)
        if len(product.args) != 2:
            return None
        left, right = product.args[0].value, product.args[1].value
    if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Multiply):
        left = left.right  # `logit_scale * a @ b.T`
    transposed = _untransposed(right)
    if transposed is right:
        return None
    left, transposed = _normalized(facts, left), _normalized(facts, transposed)
    if not isinstance(left, cst.Name) or not isinstance(transposed, cst.Name):
        return None
    return left.value, transposed.value


def _einsum_operands(facts: Facts, call: cst.Call) -> Optional[tuple[str, str]]:
    """(a, b) of `torch.einsum("nc,mc->nm", a, b)` (or `[a, b]`): every row of a with every row of b."""
    arguments = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    spec = string_value(arguments[0]) if arguments else None
    if len(arguments) == 2 and isinstance(arguments[1], (cst.List, cst.Tuple)):
        arguments = [arguments[0], *(element.value for element in arguments[1].elements)]
    match = re.fullmatch(r"(\w)(\w),(\w)(\w)->(\w)(\w)", (spec or "").replace(" ", ""))
    if len(arguments) != 3 or match is None:
        return None
    row, column, other_row, other_column, out_row, out_column = match.groups()
    if column != other_column or row == other_row or (out_row, out_column) != (row, other_row) or column == row:
        return None
    left, right = _normalized(facts, arguments[1]), _normalized(facts, arguments[2])
    if not isinstance(left, cst.Name) or not isinstance(right, cst.Name):
        return None
    return left.value, right.value


def _cosine_operands(facts: Facts, call: cst.Call) -> Optional[tuple[str, str]]:
    """(a, b) of `F.cosine_similarity(a.unsqueeze(1), b.unsqueeze(0), dim=2)` (dim=-1 too)."""
    arguments = [arg.value for arg in call.args if arg.keyword is None]
    dims = [arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "dim"]
    if len(arguments) == 3:
        dims, arguments = [arguments[2]], arguments[:2]
    if len(arguments) != 2 or len(dims) != 1 or not _integer(dims[0], ("2", "-1")):
        return None
    names = []
    for argument, axis in zip(arguments, ("1", "0")):
        if not (isinstance(argument, cst.Call) and isinstance(argument.func, cst.Attribute)
                and argument.func.attr.value == "unsqueeze" and len(argument.args) == 1
                and _integer(argument.args[0].value, (axis,))):
            return None
        inner = _normalized(facts, argument.func.value)
        if not isinstance(inner, cst.Name):
            return None
        names.append(inner.value)
    return names[0], names[1]


def _integer(node: cst.BaseExpression, values: tuple[str, ...]) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) \
            and isinstance(node.expression, cst.Integer):
        return "-" + node.expression.value in values
    return isinstance(node, cst.Integer) and node.value in values


def _normalized(facts: Facts, node: cst.BaseExpression) -> cst.BaseExpression:
    """`x` of `F.normalize(x, dim=-1)`: a row-wise normalization, the same before or after
    the gather."""
    if isinstance(node, cst.Call) and node in facts.calls_named.get(NORMALIZE, ()) and node.args \
            and node.args[0].keyword is None:
        return node.args[0].value
    return node


def _embedding_of_this_batch(facts: Facts, loop: cst.For, name: str, similarity: cst.CSTNode) -> bool:
    """`name` is assigned once in the loop's body, above the similarity (or the loss's call),
    from an expression that calls the model (`z = model(x)`, `F.normalize(model(x), dim=1)`,
    `a, b = model(x, y)`)."""
    scope = facts.function_of(similarity)
    assigns = [assign for assign in facts.nodes_of(cst.Assign)
               if facts.function_of(assign) is scope and name in _bound(assign)
               and facts.ancestor_in(assign, loop.body) is not None]
    if len(assigns) != 1 or facts.start_of(assigns[0]) > facts.start_of(similarity):
        return False
    held = {holder for model in facts.models for holder in facts.model_holders(model)}
    return any((scope, dotted_name(call.func)) in held for call in find_all(assigns[0].value, cst.Call))


def _size_of(node: cst.BaseExpression, names: set[str]) -> bool:
    """`x.shape[0]`, `x.size(0)`, `len(x)` of one of `names`."""
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute) \
            and node.value.attr.value == "shape" and isinstance(node.value.value, cst.Name):
        index = node.slice[0].slice if len(node.slice) == 1 else None
        return node.value.value.value in names and isinstance(index, cst.Index) \
            and isinstance(index.value, cst.Integer) and index.value.value == "0"
    if isinstance(node, cst.Call) and len(node.args) == 1:
        argument = node.args[0].value
        if dotted_name(node.func) == "len":
            return isinstance(argument, cst.Name) and argument.value in names
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "size" \
                and isinstance(node.func.value, cst.Name):
            return node.func.value.value in names and isinstance(argument, cst.Integer) and argument.value == "0"
    return False


def _reads_of(statement: cst.CSTNode, names: set[str]) -> list[cst.BaseExpression]:
    """The outermost expressions of `statement` that read one of `names`: the size read when
    the name is read for its size, the name itself otherwise."""
    reads: list[cst.BaseExpression] = []

    class _Reads(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, cst.BaseExpression) and _size_of(node, names):
                reads.append(node)
                return False
            if isinstance(node, cst.Attribute) and node.attr.value in ("device", "dtype") \
                    and isinstance(node.value, cst.Name):
                return False  # where the tensor lives, the same before and after the gather
            if isinstance(node, cst.Name) and node.value in names:
                reads.append(node)
            return True

    traversal.visit(statement, _Reads())
    return reads


_INFO_NCE = '''\
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Linear(8, 4).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=16, shuffle=True)
for epoch in range(3):
    for (x,) in loader:
        x = x.to(device)
        q, k = model(x), model(x + 0.1)
        logits = q @ k.T / 0.1
        loss = F.cross_entropy(logits, torch.arange(len(logits), device=device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''

_NT_XENT = _INFO_NCE.replace(
    "        logits = q @ k.T / 0.1\n"
    "        loss = F.cross_entropy(logits, torch.arange(len(logits), device=device))\n",
    "        z = torch.cat([q, k])\n        logits = z @ z.T / 0.1\n        logits.fill_diagonal_(float(\"-inf\"))\n"
    "        n = len(q)\n"
    "        loss = F.cross_entropy(logits, torch.cat([torch.arange(n, 2 * n), torch.arange(n)]))\n")

CASES = (
    Emits(_INFO_NCE, "DDP410", ("gather_with_grad(q), gather_with_grad(k)",)),
    # NT-Xent: each view gathered before their concatenation, so a row's positive stays N rows away.
    Emits(_NT_XENT, "DDP410", ("q, k = gather_with_grad(q), gather_with_grad(k)\n        z = torch.cat",)),
    # Its labels from a configured batch size would not follow the gathered views: reported.
    Silent(_NT_XENT.replace("n = len(q)", "n = 16"), "DDP410"),
    # Labels sized by the input batch do not follow a gathered similarity: reported.
    Silent(_INFO_NCE.replace("len(logits)", "x.size(0)"), "DDP410"),
)
