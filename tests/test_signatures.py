"""What `ClassifierModule` relies on of every network: its signature starts with the data's facts
(``net(num_classes, image_size, in_chans)``), and configs name it by its exported class path."""

from __future__ import annotations

import inspect

import pytest

import mixer_lightning.models as models
from mixer_lightning.models import get_entry, list_models
from mixer_lightning.models.registry import DATA_FACTS, class_path

FAMILIES = sorted({get_entry(name).family for name in list_models()})


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_takes_the_data_facts_first_and_is_exported(family: str) -> None:
    cls = get_entry(family).constructor
    assert tuple(inspect.signature(cls).parameters)[:3] == DATA_FACTS
    assert class_path(cls) == f"mixer_lightning.models.{cls.__name__}" and getattr(models, cls.__name__) is cls
