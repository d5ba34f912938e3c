"""Per-layer statistics of a training step: what each layer's output looks like forward, and
the gradient that flows back into it (the plots of Karpathy's makemore lectures, part 3).

    with mg.viz.LayerStats(model, kinds=(nn.Tanh,)) as stats:
        loss = loss_fn(model(x), y)
        loss.backward()
    print(stats.table())        # per layer: mean, std, saturation of the output; its gradient
    stats.plot("layers.png")    # histograms, one line per layer, activations and gradients

Forward hooks on the chosen layers (every layer without children by default, or those of
`kinds`) keep each output, and a tensor hook on that output keeps the gradient backward
computes for it. Only the last forward of each layer is kept. Saturation is the share of
outputs with |value| > 0.97: for tanh, the part where its derivative is nearly 0, so little
gradient flows back (the "dead" neurons of a badly scaled initialisation).
"""
import numpy

from ..atomic import atomic_write

SATURATED = 0.97


class LayerStats:
    """Forward and tensor hooks on the layers of `model`; `.remove()` (or the end of a `with`
    block) takes them off. `records` maps layer name -> {"kind", "output", "grad"} (arrays)."""

    def __init__(self, model, kinds=None):
        self.records, self._handles = {}, []
        for name, module in model.named_modules():
            chosen = isinstance(module, kinds) if kinds else not list(module.children())
            if chosen and name:
                self._handles.append(module.register_forward_hook(self._hook(name)))

    def _hook(self, name):
        def keep(module, args, output):
            record = {"kind": type(module).__name__, "output": output.numpy(force=True).copy(),
                      "grad": None}
            self.records[name] = record
            if output.requires_grad:
                def grad_hook(grad):
                    record["grad"] = grad.numpy(force=True).copy()
                output.register_hook(grad_hook)
        return keep

    def remove(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    def rows(self):
        """[(name, kind, output mean, output std, saturated %, grad mean, grad std)], the
        gradient numbers None for a layer that got none."""
        found = []
        for name, r in self.records.items():
            out, grad = r["output"].astype(numpy.float64), r["grad"]
            g = (None, None) if grad is None else (float(grad.mean()), float(grad.std()))
            found.append((name, r["kind"], float(out.mean()), float(out.std()),
                          100.0 * float((numpy.abs(out) > SATURATED).mean())) + g)
        return found

    def table(self):
        """The rows as an aligned text table."""
        lines = [f"{'layer':<8}{'kind':<10}{'out mean':>10}{'out std':>10}{'saturated':>11}"
                 f"{'grad mean':>12}{'grad std':>11}"]
        for name, kind, mean, std, saturated, gmean, gstd in self.rows():
            grads = (f"{gmean:>12.2e}{gstd:>11.2e}" if gstd is not None
                     else f"{'-':>12}{'-':>11}")
            lines.append(f"{name:<8}{kind:<10}{mean:>10.3f}{std:>10.3f}{saturated:>10.1f}%"
                         + grads)
        return "\n".join(lines)

    def plot(self, path, bins=60):
        """Two panels of histograms (as lines, one per layer): the outputs, and their gradients.
        Written atomically to `path` (.png, .pdf, .svg); False when matplotlib is missing."""
        try:
            from matplotlib.figure import Figure
        except ImportError:
            return False
        figure = Figure(figsize=(12, 4), dpi=100)
        for panel, key, title in ((1, "output", "activation distribution"),
                                  (2, "grad", "gradient distribution")):
            axes = figure.add_subplot(1, 2, panel)
            for name, r in self.records.items():
                if r[key] is None:
                    continue
                counts, edges = numpy.histogram(r[key], bins=bins, density=True)
                label = (f"layer {name} ({r['kind']}): mean {r[key].mean():+.2g}, "
                         f"std {r[key].std():.2g}")
                axes.plot((edges[:-1] + edges[1:]) / 2, counts, label=label)
            axes.set_title(title)
            axes.legend(fontsize=7)
        figure.tight_layout()
        fmt = str(path).rsplit(".", 1)[-1].lower()
        atomic_write(path, lambda file: figure.savefig(file, format=fmt))
        return True
