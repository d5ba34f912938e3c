"""The README's quick start: a tiny regression fitted with autograd and SGD."""
import argparse

import minigrad as mg

argparse.ArgumentParser(description=__doc__).parse_args()   # (only --help)

mg.manual_seed(0)
x = mg.randn(64, 3)
y = x @ mg.tensor([[2.0], [-1.0], [0.5]]) + 0.3          # the line to recover
model = mg.nn.Linear(3, 1)
opt = mg.optim.SGD(model.parameters(), lr=0.1)
for _ in range(100):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.6f}  weight {model.weight.detach().numpy().round(3)}  "
      f"bias {model.bias.detach().numpy().round(3)}")
