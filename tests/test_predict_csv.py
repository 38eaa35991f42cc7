"""`mixer predict`'s CSV opened in a spreadsheet (issue 25, RC19): a file or class name that starts like a
formula is written with a leading ``'`` (OWASP "CSV Injection"), everything else as it is."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from PIL import Image

from mixer_lightning.cli import main

NAMES = {  # file name → its CSV cell
    "=1+1.png": "'=1+1.png",
    "@SUM(A1).png": "'@SUM(A1).png",
    "+x.png": "'+x.png",
    "-2+3.png": "'-2+3.png",
    "\ttab.png": "'\ttab.png",
    "\uff1dfull.png": "'\uff1dfull.png",  # full-width =, read as a formula by some spreadsheets
    "plain.png": "plain.png",
    "a=b.png": "a=b.png",  # only the first character matters
}


def test_names_that_start_like_a_formula_are_written_as_text(trained, tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in NAMES:
        Image.fromarray(np.full((8, 8), 128, np.uint8), "L").save(photos / name)
    classes = ["=cmd|' /C calc'!A0", "-minus", *(f"c{i}" for i in range(2, 10))]
    main(
        [
            "predict",
            "--ckpt_path",
            trained("mixer"),
            "--data.predict_root",
            "photos",
            "--data.class_names",
            str(classes),
            "--prediction_writer.topk",
            "10",
            "--prediction_writer.output",
            "out.csv",
        ]
    )
    with open(tmp_path / "out.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(row["file"] for row in rows) == sorted(NAMES.values())
    for row in rows:
        names = {row[f"class_{k}"]: row[f"name_{k}"] for k in range(1, 11)}
        assert names["0"] == "'=cmd|' /C calc'!A0" and names["1"] == "'-minus" and names["2"] == "c2"
        assert all(not row[f"prob_{k}"].startswith("'") for k in range(1, 11))  # numbers as they are
    from mixer_lightning.data.predict import spreadsheet_text

    # A carriage return too (not in a file name above: Python's csv module leaves a field holding one
    # unquoted, and a reader ends the row there).
    assert spreadsheet_text("\rx.png") == "'\rx.png" and spreadsheet_text("x\r.png") == "x\r.png"
