"""What ``milp-planner inspect`` reports: the layers after folding, with their work and weights.

Per layer: id, name, op (with the ops folded into it), output shape, MACs (Conv,
ConvTranspose, Gemm and MatMul multiplications), ops (the other work, docs/model.md section 2),
parameters, weight bytes (params x dtype_bytes) and whether it can be split by rows or by
output channels.

Parameters and BatchNormalization. A model that keeps its BatchNormalization nodes (as the
zoo's ResNets, MobileNetV2 and DenseNet do, and as PyTorch exports in training-style graphs)
has every BN folded into the conv before it, and the BN contributes 2 x C parameters (scale
and shift; the running mean and variance are statistics, not parameters). The total then
equals torchvision's trainable-parameter count (ResNet50: 25,557,032). A model whose BN was
already folded into the conv weights and biases by the exporter (``torch.onnx.export`` in
eval mode with constant folding, onnx-simplifier) has no BN nodes: ``inspect`` counts what
is in the file: the conv weights plus a bias of C per conv that absorbed a BN. The same
ResNet50 then shows 25,557,032 - 2 x 26,560 (BN) + 26,560 (new biases) = 25,530,472
parameters, which is exactly what the device has to store. Weight bytes follow the
parameters either way.
"""

from __future__ import annotations

from milp_planner.model.graph import LayerGraph

# short names for folded ops in the table
_SHORT = {"BatchNormalization": "BN", "QuantizeLinear": "Q", "DequantizeLinear": "DQ"}


def inspect_rows(graph: LayerGraph, dtype_bytes: int) -> list[dict]:
    """One dict per layer, in layer order (the JSON ``layers`` of ``inspect --json``)."""
    return [
        {
            "id": layer.id,
            "name": layer.name,
            "op": layer.op,
            "shape": list(layer.shape),
            "macs": layer.macs,
            "ops": layer.ops,
            "params": layer.params,
            "weight_bytes": layer.params * dtype_bytes,
            "row_splittable": layer.row_splittable,
            "channel_splittable": layer.channel_splittable,
            "folded": list(layer.folded),
        }
        for layer in graph.layers
    ]


def inspect_json(graph: LayerGraph, dtype_bytes: int) -> dict:
    """``{"model", "dtype_bytes", "inputs", "outputs", "layers", "totals", "warnings"}``."""
    t = graph.totals
    return {
        "model": graph.name,
        "dtype_bytes": dtype_bytes,
        "inputs": {k: list(v) for k, v in graph.inputs.items()},
        "outputs": list(graph.outputs),
        "layers": inspect_rows(graph, dtype_bytes),
        "totals": {
            "layers": len(graph.layers),
            "params": t["params"],
            "macs": t["macs"],
            "ops": t["ops"],
            "weight_bytes": t["params"] * dtype_bytes,
        },
        "warnings": list(graph.warnings),
    }


def human(n: int | float, unit: str = "") -> str:
    """1234567 -> '1.23M' (decimal prefixes)."""
    n = float(n)
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.3g}{prefix}{unit}" if n / factor < 100 else f"{n / factor:.0f}{prefix}{unit}"
    return f"{n:.0f}{unit}"


def op_label(op: str, folded) -> str:
    return "+".join([op, *(_SHORT.get(f, f) for f in folded)])


def _table_lines(graph: LayerGraph) -> list[str]:
    """The layer table as aligned lines with rich markup.

    Built by hand rather than with ``rich.table.Table``: measuring and wrapping a few hundred
    rows in rich costs about half a second, more than importing the model.
    """
    from rich.markup import escape

    from milp_planner.io import printable

    head = ["id", "name", "op", "output", "MACs", "ops", "params", "rows", "chan"]
    right = {0, 3, 4, 5, 6}
    rows = [
        [
            str(layer.id),
            printable(layer.name),  # an escape sequence in a node name is shown, not run
            printable(op_label(layer.op, layer.folded)),
            "x".join(map(str, layer.shape)),
            human(layer.macs) if layer.macs else "",
            human(layer.ops) if layer.ops else "",
            f"{layer.params:,}" if layer.params else "",
            "yes" if layer.row_splittable else "-",
            "yes" if layer.channel_splittable else "-",
        ]
        for layer in graph.layers
    ]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]

    def fmt(cells: list[str], header: bool = False) -> str:
        out = []
        for i, (cell, wd) in enumerate(zip(cells, widths)):
            text = cell.rjust(wd) if i in right else (cell.center(wd) if i >= 7 else cell.ljust(wd))
            if i == len(cells) - 1:
                text = text.rstrip()
            text = escape(text)
            if not header and i >= 7:
                text = f"[green]{text}[/]" if cell == "yes" else f"[dim]{text}[/]"
            out.append(text)
        line = "  ".join(out).rstrip()
        return f"[bold]{line}[/]" if header else line

    return [fmt(head, header=True)] + [fmt(r) for r in rows]


def render_inspect(graph: LayerGraph, dtype_bytes: int, console=None) -> None:
    """Print the layer table, a totals line and the importer's warnings."""
    from rich.console import Console
    from rich.markup import escape as rich_escape

    from milp_planner.io import printable

    def escape(text) -> str:
        return rich_escape(printable(text))

    if console is None:
        console = Console(highlight=False, soft_wrap=True)
    n = len(graph.layers)
    count = f"{n} layer" + ("" if n == 1 else "s")
    lines = [f"[bold]{escape(graph.name)}[/]: {count}", *_table_lines(graph)]
    t = graph.totals
    ins = ", ".join(f"{k} ({'x'.join(map(str, v))})" for k, v in graph.inputs.items())
    lines.append(
        f"[bold]total[/]: {count}, {t['params']:,} params "
        f"({human(t['params'] * dtype_bytes, 'B')} at {dtype_bytes} B each), "
        f"{t['macs']:,} MACs ({human(t['macs'])}), {t['ops']:,} other ops; inputs: {escape(ins)}"
    )
    lines += ["[yellow]warning:[/] " + escape(w) for w in graph.warnings]
    console.print("\n".join(lines), highlight=False, soft_wrap=True)
