"""Pictures of a trained network's weights (Tolstikhin et al. 2021, Figure 5, supp. Figures 1-2; Hayase &
Karakida 2024, Figures 1 and S.9), as PNGs in ``--out``:

- ``token_mixing_units.png``: the units of the first token-mixing layers on the √S0×√S0 patch grid they
  read, each followed by its closest inverse, lowest spatial frequency first;
- ``stem_units.png``: the per-patch FC's units as P×P images (RGB for colour images; 0 is mid-grey);
- ``sparsity_patterns.png``: the non-zeros of the first effective m×m weights: I_C ⊗ W and Wᵀ ⊗ I_S of
  a Mixer, J2 (I ⊗ W) J1 of an RP Mixer, M ⊙ W of an SW-MLP.

A picture that does not apply is skipped with the reason (asked for by ``--what``: an error).
``--demo`` needs no checkpoint: Figure S.9, the patterns at initialisation, S = C = 8.

Examples:
    mixer visualize --ckpt runs/mixer/version_0/checkpoints/best.ckpt --out pictures
    mixer visualize --ckpt best.ckpt --out pictures --what token_units --blocks 1,2 --units 0
    mixer visualize --demo --out docs
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import NonNegativeInt, PositiveInt, restricted_number_type

from mixer_lightning.commands import lists
from mixer_lightning.errors import ConfigError, require
from mixer_lightning.models.registry import paper_name
from mixer_lightning.safety.atomic import pyplot, save_figure

PICTURES = ("token_units", "stem_units", "sparsity")
FILES = {"token_units": "token_mixing_units.png", "stem_units": "stem_units.png", "sparsity": "sparsity_patterns.png"}
ZOOM = 64  # entries a side of the full-resolution corner drawn under a pooled pattern
AtLeastTwo = restricted_number_type(None, int, (">=", 2))


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--ckpt", type=str, default=None, help="a checkpoint of `mixer fit` or `mixer convert`")
    parser.add_argument("--out", type=str, required=True, help="folder for the PNGs")
    parser.add_argument("--demo", action="store_true", help="no checkpoint: the sparsity patterns of Figure S.9")
    parser.add_argument("--what", type=str, default=None, help=f"comma-separated subset of {', '.join(PICTURES)}")
    parser.add_argument("--blocks", type=str, default=None, help="token units: 1-based blocks (default 1,2,3)")
    parser.add_argument("--units", type=NonNegativeInt, default=64, help="token units: pairs per block (0: all)")
    parser.add_argument("--max_width", type=PositiveInt, default=4096, help="sparsity: largest effective width m")
    parser.add_argument("--tokens", type=AtLeastTwo, default=8, help="--demo: S")
    parser.add_argument("--channels", type=AtLeastTwo, default=8, help="--demo: C (the SW-MLP's p = 1/C)")
    parser.add_argument("--seed", type=int, default=0, help="--demo: seed of the random weights")
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")


def _save(fig, path: Path, dpi: int) -> None:
    with pyplot().rc_context({"savefig.bbox": "tight"}):  # titles and colour bars inside the picture
        save_figure(fig, path, "out", dpi)


def _tile(images: torch.Tensor, columns: int, gap: int = 1) -> torch.Tensor:
    """(N, h, w) or (N, 3, h, w) images as one canvas, `columns` per row, NaN (drawn blank) between them."""
    from torchvision.utils import make_grid

    grid = make_grid(images if images.dim() == 4 else images[:, None], columns, gap, pad_value=float("nan"))
    return grid[0] if images.dim() == 3 else grid.permute(1, 2, 0)


def draw_token_units(panels: list[tuple[int, torch.Tensor, list[tuple[int, int]]]], title: str, path: Path) -> None:
    """One panel per block, stacked: rows of 8 (unit, closest inverse) pairs, each tile scaled by its own
    max |w| (Mixer Figure 5 puts the blocks side by side)."""
    plt = pyplot()
    canvases = []
    for _, images, pairs in panels:
        images = images / images.flatten(1).abs().amax(1).clamp_min(1e-12)[:, None, None]
        gap = torch.full((len(pairs), images.shape[1], 1), float("nan"))
        pictures = torch.cat([images[[a for a, _ in pairs]], gap, images[[b for _, b in pairs]]], dim=2)
        canvases.append(_tile(pictures, columns=min(8, len(pairs)), gap=2))
    heights = [7.0 * c.shape[0] / c.shape[1] + 0.55 for c in canvases]
    size, ratios = (8.3, sum(heights) + 0.4), {"height_ratios": heights}
    fig, axes = plt.subplots(len(panels), 1, figsize=size, squeeze=False, gridspec_kw=ratios)
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="white")  # the gaps between tiles (NaN)
    for ax, (block, images, pairs), canvas in zip(axes[:, 0], panels, canvases, strict=True):
        image = ax.imshow(canvas.numpy(), cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
        side = images.shape[-1]
        pairing = f"block {block}: {len(pairs)} of {images.shape[0]} units, each followed by its closest inverse"
        ax.set_title(f"{pairing}\n{side}×{side} patch grid, low spatial frequency first", fontsize=9)
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.colorbar(image, ax=axes[:, 0].tolist(), fraction=0.03, pad=0.02, label="weight / max |weight| of the unit")
    _save(fig, path, 100)


def draw_stem_units(weight: torch.Tensor, title: str, path: Path) -> None:
    """(C, in_chans, P, P) units as P×P images (RGB with 0 at mid-grey, or a diverging map for grey)."""
    plt = pyplot()
    n, chans, p, _ = weight.shape
    scaled = weight / weight.flatten(1).abs().amax(1).clamp_min(1e-12)[:, None, None, None]  # in [-1, 1]
    columns = max(1, min(16, math.ceil(math.sqrt(n))))
    # At least 5 inches wide: the two-line title fits over a few units.
    size = min(10, max(5.0, 1.0 + 0.55 * columns)), min(10, 1.3 + 0.55 * math.ceil(n / columns))
    fig, ax = plt.subplots(figsize=size)
    if chans == 3:
        canvas = _tile((scaled + 1) / 2, columns).nan_to_num(1.0).numpy()  # gaps: white
        ax.imshow(canvas, interpolation="nearest")
        note = "RGB, 0 = mid-grey"
    else:
        cmap = plt.get_cmap("RdBu_r").with_extremes(bad="white")
        image = ax.imshow(_tile(scaled.mean(1), columns).numpy(), cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight / max |weight| of the unit")
        note = "channel mean" if chans > 1 else "grey"
    ax.set_title(f"{title}\n{n} linear projection units, {p}×{p} ({note}), low frequency first", fontsize=9)
    ax.axis("off")
    _save(fig, path, 110)


def _unit_axes(ax) -> None:
    ax.set_xlabel("input unit", fontsize=8)
    ax.set_ylabel("output unit", fontsize=8)
    ax.tick_params(labelsize=7)


def draw_patterns(panels: list[tuple[str, torch.Tensor]], title: str, path: Path) -> None:
    """Pictures of the non-zero entries of effective weights, one panel each, with their density. A
    matrix larger than the picture is drawn as the fraction of non-zeros per pixel on a square-root
    grey scale (a 1 %-dense region is visibly grey, not black), and its top-left 64×64 entries one pixel
    each underneath, where single connections show."""
    from matplotlib.colors import PowerNorm

    from mixer_lightning.analysis.visualize import pattern_image

    plt = pyplot()
    pictures = [pattern_image(weight) for _, weight in panels]
    zoom = any(tuple(p.shape) != tuple(w.shape) for p, (_, w) in zip(pictures, panels, strict=True))
    fig, axes = plt.subplots(
        2 if zoom else 1, len(panels), figsize=(3.6 * len(panels), 7.6 if zoom else 4.4), squeeze=False
    )
    style = {"cmap": "Greys", "norm": PowerNorm(gamma=0.5, vmin=0.0, vmax=1.0), "interpolation": "nearest"}
    for column, ((label, weight), picture) in enumerate(zip(panels, pictures, strict=True)):
        ax, (rows, cols) = axes[0, column], weight.shape
        image = ax.imshow(picture.numpy(), extent=(0, cols, rows, 0), **style)
        pooled = tuple(picture.shape) != (rows, cols)
        scale = f"\n{rows / picture.shape[0]:.3g}×{cols / picture.shape[1]:.3g} entries per pixel" if pooled else ""
        density = float((weight != 0).float().mean())
        ax.set_title(f"{label}\n{rows:,}×{cols:,}, {100 * density:.3g} % non-zero{scale}", fontsize=8.5)
        _unit_axes(ax)
        if zoom:
            side = min(ZOOM, rows, cols)
            axes[1, column].imshow((weight[:side, :side] != 0).float().numpy(), **style)
            axes[1, column].set_title(f"top-left {side}×{side} entries, one pixel each", fontsize=8.5)
            _unit_axes(axes[1, column])
    if not zoom:  # one pixel per entry: black is a connection
        fig.suptitle(f"{title}\nblack: a non-zero weight (a connection), white: zero", fontsize=10)
        fig.tight_layout()
    else:
        fig.suptitle(title, fontsize=10)
        fig.tight_layout(rect=(0, 0, 0.93, 1))
        bar = fig.add_axes((0.945, 0.56, 0.012, 0.33))  # beside the pooled row it explains
        fig.colorbar(image, cax=bar, label="fraction of non-zero\nentries per pixel")
        bar.tick_params(labelsize=7)
    _save(fig, path, 100)


def network_patterns(net: torch.nn.Module, max_width: int) -> tuple[list[tuple[str, torch.Tensor]], list[str]]:
    """The effective weights of the first mixing layers of a Mixer (or the first sparse layers of an
    SW-MLP), and the reasons for skipping any."""
    from mixer_lightning.analysis.visualize import first_effective_weight

    panels, notes = [], []
    if hasattr(net, "mixing_layers"):
        mixing = net.mixing_layers()
        start = 2 if len(mixing) > 2 and mixing[0].skip is not None else 0  # past S0 → S: square weights
        for layer in mixing[start : start + 2]:
            m_in, m_out, block = layer.tokens_in * layer.channels, layer.tokens * layer.channels, start // 2 + 1
            if max(m_in, m_out) > max_width:
                notes.append(
                    f"{layer.axis} mixing: {m_out:,}×{m_in:,} exceeds --max_width; the same at any size: --demo"
                )
                continue
            kind = "J2 (I ⊗ W) J1" if layer.permuted else "I_C ⊗ W" if layer.axis == "token" else "Wᵀ ⊗ I_S"
            label = f"{'RP ' if layer.permuted else ''}{layer.axis} mixing (block {block}): {kind}"
            panels.append((label, first_effective_weight(layer)))
    elif hasattr(net, "sparse_layers"):
        for name, layer in zip(("block 1 fc1", "block 1 fc2"), net.sparse_layers()[:2], strict=False):
            if max(layer.in_features, layer.out_features) > max_width:
                notes.append(f"SW-MLP {name}: {layer.out_features:,}×{layer.in_features:,} exceeds --max_width")
            else:
                panels.append((f"SW-MLP {name}: M ⊙ W (p = {layer.density:.3g})", layer.effective_weight().detach()))
    else:
        notes.append(f"the {paper_name(type(net).__name__)} has no mixing or static sparse layers")
    return panels, notes


def demo_patterns(tokens: int, channels: int, seed: int) -> list[tuple[str, torch.Tensor]]:
    """Figure S.9: freshly initialised effective weights at S tokens and C channels (m = S·C): an SW-MLP
    layer with p = 1/C, a Mixer's token and channel mixing, an RP Mixer's token mixing."""
    from mixer_lightning.analysis.effective import effective_linears
    from mixer_lightning.models.layers import FcBlock
    from mixer_lightning.models.pk import MixingLayer
    from mixer_lightning.models.sparse import MaskedLinear

    m = tokens * channels
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        sw = MaskedLinear(m, m, 1.0 / channels).effective_weight().detach()
        token = MixingLayer("token", FcBlock(tokens, tokens), tokens, tokens, channels)
        channel = MixingLayer("channel", FcBlock(channels, channels), tokens, tokens, channels)
        rp = MixingLayer("token", FcBlock(tokens, tokens), tokens, tokens, channels, permute=True)
    return [
        (f"SW-MLP: M ⊙ W (p = 1/{channels})", sw),
        ("Mixer token mixing: I_C ⊗ W", effective_linears(token, torch.float32)[0].weight),
        ("Mixer channel mixing: Wᵀ ⊗ I_S", effective_linears(channel, torch.float32)[0].weight),
        ("RP Mixer token mixing: J2 (I ⊗ W) J1", effective_linears(rp, torch.float32)[0].weight),
    ]


def checkpoint_pictures(args: Namespace, out: Path) -> tuple[list[str], list[str], str]:
    """The pictures of ``--what`` that apply to the checkpoint's network (written), why others not, and the
    network's name in the papers (``RP S-Mixer``)."""
    from mixer_lightning.analysis import visualize as vis
    from mixer_lightning.tasks.loading import load_classifier

    wanted = PICTURES if args.what is None else lists.comma_list(args.what, "what", str, "pictures", "stem_units")
    require(set(wanted) <= set(PICTURES), "what", f"unknown picture in {args.what!r}", f"choose from {PICTURES}")
    net = load_classifier(args.ckpt, field="ckpt").net
    name = paper_name(type(net).__name__, getattr(net, "permute", False))
    title, written, notes = f"{name} ({Path(args.ckpt).name})", [], []

    def skipped(picture: str, reasons: list[str], drawn: bool) -> None:
        if not drawn and args.what is not None:  # asked for by name: an error
            raise ConfigError("what", f"{picture} does not apply: {'; '.join(reasons)}", "draw another picture")
        notes.extend(f"{picture}: {reason}" for reason in reasons)

    if "token_units" in wanted:
        blocks = lists.integers(args.blocks, "blocks", example="1,2,3") if args.blocks else None
        blocks, reasons = vis.spatial_token_blocks(net, blocks)
        skipped("token_units", reasons, bool(blocks))
        if blocks:
            panels = []
            for block in blocks:
                images = vis.token_units(net, block)
                pairs = vis.paired_order(images)
                panels.append((block, images, pairs[: args.units] if args.units else pairs))
            draw_token_units(panels, f"Token-mixing units of {title}", out / FILES["token_units"])
            written.append(str(out / FILES["token_units"]))
    if "stem_units" in wanted:
        if not hasattr(getattr(net, "stem", None), "proj"):
            skipped("stem_units", [f"the {name} has no per-patch FC"], False)
        else:
            units = vis.stem_units(net)
            draw_stem_units(
                units[: 2 * args.units] if args.units else units, f"Stem of {title}", out / FILES["stem_units"]
            )
            written.append(str(out / FILES["stem_units"]))
    if "sparsity" in wanted:
        panels, reasons = network_patterns(net, args.max_width)
        skipped("sparsity", reasons, bool(panels))
        if panels:
            draw_patterns(panels, f"Effective weights of {title}", out / FILES["sparsity"])
            written.append(str(out / FILES["sparsity"]))
    return written, notes, name


def run(args: Namespace) -> None:
    from mixer_lightning.safety.atomic import check_output_dir

    out = check_output_dir(args.out, "out", "the PNGs")  # before any work: nothing written
    if args.demo:
        require(args.ckpt is None, "demo", "--demo draws freshly initialised weights", "drop --ckpt or --demo")
        require(args.what in (None, "sparsity"), "what", "--demo draws the sparsity patterns only", "drop --what")
        m = args.tokens * args.channels
        title = f"Effective weights at initialisation, S = {args.tokens}, C = {args.channels}, m = S·C = {m}"
        draw_patterns(
            demo_patterns(args.tokens, args.channels, args.seed), f"{title} (Fig. S.9)", out / FILES["sparsity"]
        )
        written, notes, name = [str(out / FILES["sparsity"])], [], None
    else:
        require(args.ckpt is not None, "ckpt", "no checkpoint given", "give --ckpt CKPT, or --demo")
        written, notes, name = checkpoint_pictures(args, out)
        require(bool(written), "ckpt", f"no picture applies: {'; '.join(notes)}", "visualise a Mixer or an SW-MLP")
    if args.json:
        print(json.dumps({"network": name, "written": written, "skipped": notes}, indent=2))
        return
    for line in [f"skipped {note}" for note in notes] + [f"written: {path}" for path in written]:
        print(line)
