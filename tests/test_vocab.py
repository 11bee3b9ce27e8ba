"""The vocabulary module owns the words and their colours: every colour table is keyed by its
vocabulary (in order), the readers write only words from it, and the views take colours from
it rather than defining their own."""

from __future__ import annotations

import pytest
from conftest import SAMPLES

import workbench as wb
from workbench import vocab
from workbench.formats.pt2 import schema as pt2_schema
from workbench.formats.pte.tensors import STORAGES as PTE_STORAGES

TABLES = [(vocab.SEGMENT_KINDS, vocab.KIND_COLORS), (vocab.STORAGES, vocab.STORAGE_COLORS),
          (vocab.CLASSES, vocab.CLASS_COLORS), (vocab.TIMELINE_KINDS, vocab.TIME_COLORS),
          (vocab.LINK_KINDS, vocab.LINK_COLORS)]


@pytest.mark.parametrize("words, colours", TABLES)
def test_every_word_has_one_colour_in_vocabulary_order(words, colours) -> None:
    assert tuple(colours) == words
    assert all(isinstance(c, str) and c.startswith("#") and len(c) == 7 for c in colours.values())


def test_a_colour_table_that_disagrees_with_its_vocabulary_fails() -> None:
    with pytest.raises(AssertionError, match="no colour for"):
        vocab._coloured(("a", "b"), {"a": "#000000"}, "test")
    with pytest.raises(AssertionError, match="unknown words"):
        vocab._coloured(("a",), {"a": "#000000", "z": "#ffffff"}, "test")


def test_derived_vocabularies_stay_inside_their_vocabulary() -> None:
    assert set(vocab.SCAN_KINDS) <= set(vocab.SEGMENT_KINDS)
    assert set(vocab.KIND_CLASS) <= set(vocab.SEGMENT_KINDS)
    assert set(vocab.KIND_CLASS.values()) <= set(vocab.CLASSES)
    assert vocab.NO_BYTES <= set(vocab.STORAGES)


def test_readers_write_words_of_the_vocabulary() -> None:
    assert set(PTE_STORAGES) <= set(vocab.STORAGES)
    pt2_storages = {v for k, v in vars(pt2_schema).items()
                    if k.startswith("STORAGE_") and k != "STORAGE_OFFSET"}
    pt2_kinds = {v for k, v in vars(pt2_schema).items() if k.startswith("KIND_")}
    assert pt2_storages and pt2_storages <= set(vocab.STORAGES)
    assert pt2_kinds and pt2_kinds <= set(vocab.SEGMENT_KINDS)
    from workbench.timing import _KINDS

    assert set(_KINDS.values()) <= set(vocab.TIMELINE_KINDS)


@pytest.mark.parametrize("name", ["mlp_external.pte", "mlp.pt2", "mlp_xnnpack.pte"])
def test_sample_frames_use_the_vocabulary(name: str) -> None:
    with wb.open(SAMPLES / name) as art:
        assert set(art.segments["kind"].astype(str)) <= set(vocab.SEGMENT_KINDS)
        assert set(art.tensors["storage"].astype(str)) <= set(vocab.STORAGES)


def test_plots_take_their_colours_from_the_vocabulary() -> None:
    pytest.importorskip("matplotlib")
    from workbench import plots

    for name in ("KIND_COLORS", "STORAGE_COLORS", "CLASS_COLORS", "TIME_COLORS", "LINK_COLORS",
                 "OTHER_COLOR"):
        assert getattr(plots, name) is getattr(vocab, name), name
