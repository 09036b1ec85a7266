"""analysis.forward_outputs: which submodules each output of a forward comes from."""
import ast
import textwrap

from ddpify.analysis.forward_outputs import output_parts, submodules


def _parts(source: str) -> dict:
    node = ast.parse(textwrap.dedent(source)).body[-1]
    assert isinstance(node, ast.ClassDef)
    qualify = {"nn.Linear": "torch.nn.Linear", "nn.ReLU": "torch.nn.ReLU"}.get
    return output_parts(node, submodules(node, lambda name: qualify(name) or name, {"Block"}))


def test_tuple_outputs_reach_through_local_names_and_methods():
    parts = _parts('''
        class Net:
            def __init__(self):
                self.body = nn.Linear(4, 8)
                self.act = nn.ReLU()
                self.head = nn.Linear(8, 2)
                self.aux = Block()

            def side(self, h):
                return self.aux(h)

            def forward(self, x):
                h = self.act(self.body(x))
                return self.head(h), self.side(h)
    ''')
    assert parts == {0: frozenset({"body", "head"}), 1: frozenset({"body", "aux"})}


def test_dict_outputs_by_key():
    parts = _parts('''
        class Net:
            def __init__(self):
                self.cls = nn.Linear(4, 2)
                self.box = nn.Linear(4, 4)

            def forward(self, x):
                return {"logits": self.cls(x), "boxes": self.box(x)}
    ''')
    assert parts == {"logits": frozenset({"cls"}), "boxes": frozenset({"box"})}


def test_returns_of_different_shapes_give_nothing():
    assert _parts('''
        class Net:
            def __init__(self):
                self.head = nn.Linear(4, 2)
                self.aux = nn.Linear(4, 2)

            def forward(self, x, with_aux=False):
                if with_aux:
                    return self.head(x), self.aux(x)
                return self.head(x)
    ''') == {}
