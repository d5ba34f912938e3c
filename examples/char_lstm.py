"""A character-level LSTM language model on a small bundled text (the US Declaration of
Independence and the Gettysburg Address, public domain: examples/data/declaration.txt). It
trains with Adam on random windows of the text, prints its loss curve, and samples new text one
character at a time, carrying the LSTM's state.

    python examples/char_lstm.py                      # 500 steps, a few minutes on one core
    python examples/char_lstm.py --steps 50 --hidden 64
"""
import argparse
import pathlib

import minigrad as mg
import minigrad.nn.functional as F
from minigrad import nn

TEXT = pathlib.Path(__file__).resolve().parent / "data" / "declaration.txt"


def load_text(path):
    """(the characters in order, the text as int64 indices into them)."""
    text = pathlib.Path(path).read_text()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return chars, mg.tensor([index[c] for c in text], dtype=mg.long)


def get_batch(data, batch_size, block_size, generator):
    """`batch_size` random windows of the text and the same windows one character on."""
    starts = mg.randint(0, len(data) - block_size - 1, (batch_size,), generator=generator)
    x = mg.stack([data[i:i + block_size] for i in starts])
    y = mg.stack([data[i + 1:i + 1 + block_size] for i in starts])
    return x, y


def print_curve(losses, every):
    """The loss curve: the mean training loss of each `every` steps."""
    means = [sum(losses[i:i + every]) / len(losses[i:i + every])
             for i in range(0, len(losses), every)]
    for n, mean in enumerate(means):
        print(f"step {min((n + 1) * every, len(losses)):5d}  loss {mean:.4f}")
    print("loss curve:", [round(m, 4) for m in means])


class CharLSTM(nn.Module):
    """Embedding -> LSTM (batch_first) -> a linear layer to the next character's logits."""

    def __init__(self, vocab_size, embed, hidden, layers, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True, dropout=dropout)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, idx, state=None):
        out, state = self.lstm(self.embed(idx), state)
        return self.head(out), state


@mg.no_grad()
def sample(model, chars, length, temperature, generator):
    """`length` characters drawn one at a time, starting from a capital T."""
    model.eval()
    idx, state, out = mg.tensor([[chars.index("T")]]), None, ["T"]
    for _ in range(length - 1):
        logits, state = model(idx, state)
        probs = F.softmax(logits[:, -1] / temperature, dim=-1)
        idx = mg.multinomial(probs, 1, generator=generator)
        out.append(chars[idx.item()])
    model.train()
    return "".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--block-size", type=int, default=64, help="characters per window")
    parser.add_argument("--embed", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--log-every", type=int, default=50, help="steps per loss-curve point")
    parser.add_argument("--sample-length", type=int, default=300)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--text", type=pathlib.Path, default=TEXT)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    mg.manual_seed(args.seed)
    generator = mg.Generator().manual_seed(args.seed)
    chars, data = load_text(args.text)
    model = CharLSTM(len(chars), args.embed, args.hidden, args.layers, args.dropout)
    opt = mg.optim.Adam(model.parameters(), lr=args.lr)
    print(f"{len(data)} characters, {len(chars)} distinct; "
          f"{sum(p.numel() for p in model.parameters())} parameters")
    losses = []
    for _ in range(args.steps):
        x, y = get_batch(data, args.batch_size, args.block_size, generator)
        logits, _ = model(x)
        loss = F.cross_entropy(logits.reshape(-1, len(chars)), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    print_curve(losses, args.log_every)
    print("sample:")
    print(sample(model, chars, args.sample_length, args.temperature, generator))


if __name__ == "__main__":
    import cli
    cli.run(main)
