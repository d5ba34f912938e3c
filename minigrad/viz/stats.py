"""Per-layer statistics of a training step: what each layer's output looks like forward, and
the gradient that flows back into it (the plots of Karpathy's makemore lectures, part 3).

    with mg.viz.LayerStats(model, kinds=(nn.Tanh,)) as stats:
        loss = loss_fn(model(x), y)
        loss.backward()
    print(stats.table())        # per layer: mean, std (and saturation) of the output; its grad
    stats.plot("layers.png")    # histograms, one line per layer, activations and gradients

Forward hooks on the chosen layers (every layer without children by default, or those of
`kinds`) keep each output, and a tensor hook on that output keeps the gradient backward
computes for it. Only the last forward of each layer is kept.

Saturation is the share of outputs where the activation's derivative is (nearly) 0, so little
gradient flows back (the "dead" neurons of a badly scaled initialisation). Only saturating
activations have it, each by its own rule (SATURATION): tanh beyond +-0.97 (tanh' < 0.06),
sigmoid outside [0.03, 0.97] (sigmoid' < 0.03), hardtanh (and ReLU6) at its clip values
(derivative 0). The table's column and the rows' number are there only for them.

The plot draws one histogram line per layer; with more than LEGEND layers the lines are coloured
by depth (a colour bar, first layer to last) instead of listed in a legend, so a deep model
stays readable. The legend, when there is one, sits outside the axes.
"""
import numpy

from ..atomic import atomic_write

SATURATION = {   # kind -> share of outputs where the derivative is (nearly) 0
    "Tanh": lambda module, out: numpy.abs(out) > 0.97,
    "Sigmoid": lambda module, out: (out < 0.03) | (out > 0.97),
    "Hardtanh": lambda module, out: (out <= module.min_val) | (out >= module.max_val),
    "ReLU6": lambda module, out: (out <= module.min_val) | (out >= module.max_val),
}
LEGEND = 10   # layers at most with a legend; more are coloured by depth


class LayerStats:
    """Forward and tensor hooks on the layers of `model`; `.remove()` (or the end of a `with`
    block) takes them off. `records` maps layer name -> {"kind", "output", "grad",
    "saturated"} (arrays; "saturated" a percentage, None for a non-saturating kind)."""

    def __init__(self, model, kinds=None):
        self.records, self._handles = {}, []
        for name, module in model.named_modules():
            chosen = isinstance(module, kinds) if kinds else not list(module.children())
            if chosen and name:
                self._handles.append(module.register_forward_hook(self._hook(name)))

    def _hook(self, name):
        def keep(module, args, output):
            kind = type(module).__name__
            out = output.numpy(force=True).copy()
            rule = SATURATION.get(kind)
            record = {"kind": kind, "output": out, "grad": None,
                      "saturated": None if rule is None else 100.0 * float(
                          rule(module, out).mean())}
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
        """[(name, kind, output mean, output std, saturated %, grad mean, grad std)]: saturated
        None for a non-saturating kind, the gradient numbers None for a layer that got none."""
        found = []
        for name, r in self.records.items():
            out, grad = r["output"].astype(numpy.float64), r["grad"]
            g = (None, None) if grad is None else (float(grad.mean()), float(grad.std()))
            found.append((name, r["kind"], float(out.mean()), float(out.std()), r["saturated"])
                         + g)
        return found

    def table(self):
        """The rows as an aligned text table; the saturation column only when a layer has it."""
        rows = self.rows()
        name_width = max([len("layer")] + [len(r[0]) for r in rows]) + 2
        kind_width = max([len("kind")] + [len(r[1]) for r in rows]) + 2
        saturating = any(r[4] is not None for r in rows)
        lines = [f"{'layer':<{name_width}}{'kind':<{kind_width}}{'out mean':>10}{'out std':>10}"
                 + (f"{'saturated':>11}" if saturating else "")
                 + f"{'grad mean':>12}{'grad std':>11}"]
        for name, kind, mean, std, saturated, gmean, gstd in rows:
            line = f"{name:<{name_width}}{kind:<{kind_width}}{mean:>10.3f}{std:>10.3f}"
            if saturating:
                line += f"{saturated:>10.1f}%" if saturated is not None else f"{'-':>11}"
            line += (f"{gmean:>12.2e}{gstd:>11.2e}" if gstd is not None
                     else f"{'-':>12}{'-':>11}")
            lines.append(line)
        return "\n".join(lines)

    def plot(self, path, bins=60):
        """Two panels of histograms (as lines, one per layer): the outputs, and their gradients.
        Up to LEGEND layers are named in a legend right of the panels; more are coloured from
        the first layer to the last, with a colour bar. Written atomically to `path` (.png,
        .pdf, .svg); False when matplotlib is missing."""
        try:
            from matplotlib import colormaps
            from matplotlib.cm import ScalarMappable
            from matplotlib.colors import Normalize
            from matplotlib.figure import Figure
        except ImportError:
            return False
        records = list(self.records.items())
        deep = len(records) > LEGEND
        figure = Figure(figsize=(13, 4.2), dpi=100, layout="constrained")
        panels = figure.subplots(1, 2)
        colours = colormaps["viridis"].resampled(max(len(records), 2))
        for axes, key, title in ((panels[0], "output", "activation distribution"),
                                 (panels[1], "grad", "gradient distribution")):
            for depth, (name, r) in enumerate(records):
                if r[key] is None:
                    continue
                counts, edges = numpy.histogram(r[key], bins=bins, density=True)
                label = f"{name} {r['kind']}: mean {r[key].mean():+.2g}, std {r[key].std():.2g}"
                if key == "output" and r["saturated"] is not None:
                    label += f", {r['saturated']:.0f}% saturated"
                axes.plot((edges[:-1] + edges[1:]) / 2, counts, label=label,
                          color=colours(depth) if deep else None)
            axes.set_title(title)
            if not deep and axes.lines:
                axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                            borderaxespad=0, frameon=False)
        if deep:
            bar = figure.colorbar(ScalarMappable(Normalize(0, len(records) - 1), colours),
                                  ax=panels, pad=0.01)
            bar.set_label(f"layer, first ({records[0][0]}) to last ({records[-1][0]})")
        fmt = str(path).rsplit(".", 1)[-1].lower()
        atomic_write(path, lambda file: figure.savefig(file, format=fmt))
        return True
