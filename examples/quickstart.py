"""hndl in one minute: build a model from Python, run it, then see what a shape error looks like.

Run it with ``python examples/quickstart.py``.
"""

import torch

import hndl

# 1. Describe the model as a graph. Only the output sizes are written: in_features follow from the shapes.
g = hndl.Graph("mlp")
x = g.input("x", ("B", 784))
hidden = g.add("linear", x, name="hidden", out_features=512)
act = g.add("relu", hidden, name="act")
g.output(g.add("linear", act, name="out", out_features=10))

# 2. Build it: the whole graph is checked first, then a real torch.nn.Module comes out.
model = hndl.build(g)
print(model.nodes["n_hidden"])  # Linear(in_features=784, out_features=512, bias=True)
print(model(torch.randn(32, 784)).shape)  # torch.Size([32, 10])

# 3. The same model as a spec file, and back again.
text = hndl.dumps(g)
print(text)
assert hndl.build(hndl.loads(text)).state_dict().keys() == model.state_dict().keys()

# 4. A mistake is caught before any tensor exists, and the message names the node and the shapes.
bad = hndl.loads(
    """
hndl: 1
name: wide
inputs:
  x: {shape: [B, 784]}
  skip: {shape: [B, 100]}
nodes:
  hidden: {op: linear, in: x, out_features: 512}
  merge:  {op: add, in: [hidden, skip]}
outputs: [merge]
"""
)
try:
    hndl.build(bad)
except hndl.HndlError as error:
    print(error)
    print("code:", error.code, "| node:", error.node, "| at:", error.location)

# 5. At run time, inputs are checked against the graph's contract (once per input signature).
try:
    model(torch.randn(32, 100))
except hndl.HndlError as error:
    print(error)
