"""Every figure the project draws, rendered on tiny data through the real `mixer` commands (`sweep
report`, `sweep curves`, `cka`, `visualize`) and read back from the matplotlib Figure objects (issue 26,
Q1): a title that says what is shown, axis labels, a legend naming each series once, ticks at the
grid's values (no "2×10^1"), no bar without data, the two CKA networks named apart, sparse matrices
drawn at their density and titles inside the picture."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.figure  # noqa: E402
import pytest  # noqa: E402

from helpers import TEST_CONFIGS  # noqa: E402
from mixer_lightning.cli import main  # noqa: E402

TINY_S_MIXER = str(TEST_CONFIGS / "digits_rp_s_mixer.yaml")
TINY_MIXER = str(TEST_CONFIGS / "digits_mixer.yaml")


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, matplotlib.figure.Figure]:
    """file name -> the Figure each command saved (recorded at `Figure.savefig`, then saved as usual)."""
    figures: dict[str, matplotlib.figure.Figure] = {}
    savefig = matplotlib.figure.Figure.savefig

    def record(self, target, *args, **kwargs):
        name = Path(getattr(target, "name", target)).name
        figures[name.split(".tmp")[0].lstrip(".")] = self  # atomic writes go through a temporary name
        return savefig(self, target, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    return figures


def figure(drawn: dict, suffix: str) -> matplotlib.figure.Figure:
    names = [name for name in drawn if name.endswith(suffix)]
    assert len(names) == 1, f"{suffix}: drawn {sorted(drawn)}"
    return drawn[names[0]]


def plot_axes(fig) -> list:
    """The axes that hold data (not colour bars)."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>" and not hasattr(ax, "_colorbar")]


def check_readable(fig, legend: bool = True) -> None:
    """A title (its own or the figure's) other than "sweep", both axis labels, and a legend that names every
    labelled series once."""
    suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
    for ax in plot_axes(fig):
        title = ax.get_title() or suptitle
        assert title.strip() and title.strip() != "sweep", f"untitled axes in {fig}"
        assert ax.get_xlabel().strip() and ax.get_ylabel().strip()
        if legend:
            labels = [h.get_label() for h in ax.get_legend_handles_labels()[0]]
            shown = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
            assert labels and shown == ax.get_legend_handles_labels()[1] and len(set(shown)) == len(shown)


def renderer(fig):
    """An Agg renderer of `fig` as it was saved (the commands close their figures after saving)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def tick_labels(ax) -> list[str]:
    renderer(ax.figure)
    return [t.get_text() for t in ax.get_xticklabels()]


def check_grid_ticks(ax, grid: list[float]) -> None:
    """Ticks at every grid value, written as plain numbers."""
    ticks = [float(t) for t in ax.get_xticks()]
    assert all(any(math.isclose(g, t) for t in ticks) for g in grid), (grid, ticks)
    assert not any("times" in label or "×" in label for label in tick_labels(ax)), tick_labels(ax)


def write_tests(directory: str, accuracy, skip: set[str] = frozenset()) -> None:
    """test_metrics.json of every run of a sweep, as `mixer test` writes them (but `skip`: not run yet)."""
    for run in json.loads(Path(directory, "sweep.json").read_text())["runs"]:
        if run["point"] in skip:
            continue
        Path(run["run_dir"]).mkdir(parents=True, exist_ok=True)
        Path(run["run_dir"], "test_metrics.json").write_text(json.dumps({"test/acc1": accuracy(run)}))


def test_sweep_report_figures(drawn, capsys: pytest.CaptureFixture) -> None:
    """App. D.5's bars (a point of the grid not tested yet gets no empty bar), Fig. 6's error against C
    (a tick at each C, no "10^1" labels), and a generic numeric axis held at one value per sweep (the
    budget sweeps: one line per grid point across the sweeps, not a one-point series per pair)."""
    main(
        [
            "sweep",
            "--config",
            TINY_S_MIXER,
            "--grid",
            "model.net.init_args.permute=[[true,false],[false,true],false,true]",
            "--seeds",
            "0,1",
            "--emit",
            "d5",
        ]
    )
    write_tests(
        "d5", lambda r: 0.5 + 0.05 * r["seed"] + 0.1 * ("tf" in r["point"]), skip={"permutefalse", "permutetrue"}
    )
    main(["sweep", "report", "d5"])
    fig = figure(drawn, "error_by_permute.png")
    check_readable(fig)
    (ax,) = plot_axes(fig)
    heights = [p.get_height() for p in ax.patches]
    assert len(heights) == len(ax.get_xticks()) == 2 and all(h > 0 for h in heights)  # tf, ft: no empty false/true
    assert tick_labels(ax) == ["tf", "ft"]
    assert ax.get_title() == "d5: SMixer, digits, 2 epochs"  # what was trained, from the runs' config
    for run in json.loads(Path("d5/sweep.json").read_text())["runs"]:  # trained for 1 ($MIXER_ARGS): said so
        if Path(run["run_dir"]).is_dir():
            Path(run["run_dir"], "config.yaml").write_text("trainer:\n  max_epochs: 1\n")
    main(["sweep", "report", "d5"])
    assert plot_axes(figure(drawn, "error_by_permute.png"))[0].get_title() == "d5: SMixer, digits, 1 epoch"
    assert ax.get_ylabel() == "test error (mean ± std over 2 seeds)"

    for epochs in (1, 3):
        main(
            [
                "sweep",
                "--config",
                TINY_S_MIXER,
                "--omega",
                "1000",
                "--channels",
                "4,8,16",
                "--grid",
                f"trainer.max_epochs={epochs}",
                "--seeds",
                "0,1",
                "--emit",
                f"budget_{epochs}ep",
            ]
        )
        write_tests(f"budget_{epochs}ep", lambda r, e=epochs: 0.3 + 0.1 * e + 0.01 * r["C"] + 0.01 * r["seed"])
    # A sweep of the same grid that did not vary the budget: its config's 2 epochs place it on the axis.
    main(
        [
            "sweep",
            "--config",
            TINY_S_MIXER,
            "--omega",
            "1000",
            "--channels",
            "4,8,16",
            "--seeds",
            "0,1",
            "--emit",
            "plain",
        ]
    )
    write_tests("plain", lambda r: 0.45 + 0.01 * r["C"] + 0.01 * r["seed"])
    drawn.clear()
    main(["sweep", "report", "budget_1ep", "plain", "budget_3ep", "--out", "budget"])
    channels = figure(drawn, "error_vs_channels.png")
    check_readable(channels)
    (ax,) = plot_axes(channels)
    check_grid_ticks(ax, [4, 8, 16])
    assert ax.get_legend_handles_labels()[1] == [
        "S = C = 10",
        "budget_1ep (max_epochs = 1)",
        "budget_3ep (max_epochs = 3)",
        "plain",
    ]
    epochs_fig = figure(drawn, "error_vs_max_epochs.png")
    check_readable(epochs_fig)
    (ax,) = plot_axes(epochs_fig)
    assert ax.get_legend_handles_labels()[1] == ["C16_S6", "C4_S20", "C8_S12"]  # one line per grid point
    lines = {c.get_label(): list(c.lines[0].get_xdata()) for c in ax.containers}  # errorbar containers
    assert lines == {point: [1, 2, 3] for point in ("C16_S6", "C4_S20", "C8_S12")}  # 1, 3 epochs and plain's 2
    assert "epochs" in ax.get_xlabel()
    check_grid_ticks(ax, [1, 2, 3])


def test_curves_figure(drawn, trained) -> None:
    """`mixer sweep curves` of a directory of runs: the metric named with its unit, integer epochs."""
    run = Path(trained("mixer")).parents[2]  # runs/mixer (version_0)
    main(["sweep", "curves", str(run.parent / "mixer"), "--out", "curves", "--metric", "val/loss"])
    fig = figure(drawn, "curves_val_loss.png")
    check_readable(fig)
    (ax,) = plot_axes(fig)
    assert "cross-entropy" in ax.get_ylabel() and ax.get_xlabel().startswith("epoch")
    assert ax.get_legend_handles_labels()[1] == ["MLP-Mixer (1 seed)"]  # what was trained, not the directory


def test_cka_figure_names_both_networks(drawn, trained, capsys: pytest.CaptureFixture) -> None:
    """Two runs of one family: the axes say which run each is, not both "MLPMixer (last.ckpt)"."""
    for seed in ("seed0", "seed1"):
        Path("sweep", seed).mkdir(parents=True)
        shutil.copy(trained("mixer"), Path("sweep", seed, "last.ckpt"))
    a, b = "sweep/seed0/last.ckpt", "sweep/seed1/last.ckpt"
    main(["cka", "--ckpt", a, "--ckpt", b, "--config", TINY_MIXER, "--batches", "2", "--plot", "cka.png"])
    fig = figure(drawn, "cka.png")
    check_readable(fig, legend=False)
    (ax,) = plot_axes(fig)
    assert ax.get_xlabel() != ax.get_ylabel()
    assert "seed0/last.ckpt" in ax.get_ylabel() and "seed1/last.ckpt" in ax.get_xlabel()
    assert "S = 16, C = 16" in ax.get_xlabel()  # the Mixer's sizes


def test_visualize_figures(drawn, trained) -> None:
    """A 6 %-dense m×m pattern larger than the picture is drawn at its density (max pooling made it
    almost black); token-unit titles stay inside the picture."""
    main(["visualize", "--demo", "--tokens", "16", "--channels", "40", "--out", "demo"])
    fig = figure(drawn, "sparsity_patterns.png")
    check_readable(fig, legend=False)
    from mixer_lightning.commands.visualize import demo_patterns

    panels = demo_patterns(16, 40, seed=0)  # m = 640 entries a side, drawn in 300 pixels
    for ax, (label, weight) in zip(plot_axes(fig), panels, strict=False):  # the first row: whole matrices
        density = float((weight != 0).float().mean())
        picture = ax.get_images()[0].get_array()
        assert label in ax.get_title() and picture.shape == (300, 300)
        assert abs(float(picture.mean()) - density) < 0.2 * density, label  # the share of ink is the density
    drawn.clear()
    main(["visualize", "--ckpt", trained("mixer"), "--out", "pictures"])
    for name in ("token_mixing_units.png", "stem_units.png", "sparsity_patterns.png"):
        fig = drawn[name]
        drawing = renderer(fig)
        for ax in plot_axes(fig):
            assert ax.get_title().strip()
            box = ax.title.get_window_extent(drawing).transformed(fig.dpi_scale_trans.inverted())
            assert box.x0 >= 0 and box.x1 <= fig.get_figwidth(), (name, ax.get_title(), box)
