"""kit/prompts.py: captions through the family's own pipeline built with only the run's tokenizer and
text encoder, the empty negative on request, what ``encode_prompt`` returns under the family's keys; and the run's
text settings read for it (a recording stand-in pipeline shows the calls; each family's own tests compare its
embeddings with its pipeline's)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.kit import prompts


class Pipe:
    """A pipeline class's stand-in: records how it was built and what ``encode_prompt`` was asked."""

    built: dict = {}
    asked: dict = {}

    def __init__(self, **parts) -> None:
        Pipe.built = parts

    def encode_prompt(self, captions, **kwargs):
        Pipe.asked = {"captions": captions, "grad": torch.is_grad_enabled(), **kwargs}
        n = len(captions)
        return torch.ones(n, 3), torch.full((n, 3), 2), torch.zeros(n, 3), torch.full((n, 3), 3)


@pytest.fixture
def comps(monkeypatch):
    monkeypatch.setattr(prompts, "model_class", lambda library, name: Pipe if (library, name) == ("diffusers", "P") else None)
    encoder = SimpleNamespace(device=torch.device("cpu"))
    return Components(model=None, encoders={"text_encoder": encoder, "tokenizer": "tok", "vae": "not passed"})


def test_the_pipeline_holds_only_the_tokenizer_and_text_encoder(comps):
    prompts.text_pipeline(comps, "P")
    assert Pipe.built == {"tokenizer": "tok", "text_encoder": comps.encoders["text_encoder"], "vae": None,
                          "transformer": None, "scheduler": None}


def test_masked_prompts_and_their_negative_under_the_family_keys(comps):
    out = prompts.pipeline_prompts(comps, "P", ("a", "b"), with_negative=True, keys=prompts.MASKED, max_sequence_length=7)
    assert list(out) == ["prompt_embeds", "prompt_attention_mask", "negative_prompt_embeds",
                         "negative_prompt_attention_mask"]
    assert out["prompt_attention_mask"].eq(2).all() and out["negative_prompt_attention_mask"].eq(3).all()
    assert Pipe.asked == {"captions": ["a", "b"], "grad": False, "negative_prompt": "", "device": torch.device("cpu"),
                          "do_classifier_free_guidance": True, "max_sequence_length": 7}


def test_without_the_negative_only_the_captions_are_returned(comps):
    out = prompts.pipeline_prompts(comps, "P", ["a"], with_negative=False, negative=None)
    assert list(out) == ["prompt_embeds"] and out["prompt_embeds"].eq(1).all()
    assert Pipe.asked["negative_prompt"] is None and Pipe.asked["do_classifier_free_guidance"] is False


def test_the_text_settings_read_for_the_pipeline():
    assert prompts.caption_length(None, 300) == 300
    assert prompts.caption_length(TextSettings(max_sequence_length=64), 300) == 64
    assert prompts.instruction(None) is None and prompts.instruction(TextSettings(64)) is None
    assert prompts.instruction(TextSettings(64, instruction=("x", "y"))) == ["x", "y"]


def test_a_caption_length_is_the_flag_else_the_pipelines_default_and_what_the_run_recorded():
    from dit_lora.kit.prompts import CaptionLength

    length = CaptionLength(300)
    data = SimpleNamespace(max_sequence_length=None)
    assert length(data) == 300 and length.settings(data) == TextSettings(max_sequence_length=300)
    data.max_sequence_length = 77
    assert length(data) == 77 and length.settings(data).max_sequence_length == 77
    assert length.recorded(None) == 300 and length.recorded(TextSettings(max_sequence_length=64)) == 64


def _caption_length_families() -> list[str]:
    """The registry entries' default names whose family's caption length is a CaptionLength (``--max_sequence_length``,
    else the pipeline's default): its ``encoders.py``'s ``max_sequence_length``; but those whose card cannot pass it
    to the pipeline's call, which say why (``NO_CARD_CAPTION_LENGTH`` in their cases.py)."""
    import importlib
    import importlib.util

    from family_cases import entry_defaults, has_case, package_of

    from dit_lora.kit.prompts import CaptionLength

    found = []
    for name in entry_defaults():
        module = f"dit_lora.families.{package_of(name)}.encoders"
        if importlib.util.find_spec(module) is not None:
            length = getattr(importlib.import_module(module), "max_sequence_length", None)
            if isinstance(length, CaptionLength) and not has_case(name, "NO_CARD_CAPTION_LENGTH"):
                found.append(name)
    return found


@pytest.mark.parametrize("family", _caption_length_families())
def test_the_card_snippet_encodes_prompts_at_the_trained_caption_length(family):
    """A run at another caption length than the pipeline's says it in the card's snippet (the consumer encodes as
    training did), at the pipeline's own it adds nothing; the rows name the length either way (catalogued models,
    by Hub id: nothing is read but the catalogue's configs)."""
    import importlib

    from dit_lora.catalogue import entries
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    from family_cases import package_of

    length = importlib.import_module(f"dit_lora.families.{package_of(family)}.encoders").max_sequence_length
    hub_id = entries(family)[0].hub_id
    card = get_spec(family).card
    for value, shown in ((None, False), (length.default, False), (length.default // 2, True)):
        cfg = TrainConfig.for_family(family, pretrained_model_name_or_path=hub_id, train_data_dir="unused",
                                     max_sequence_length=value)
        snippet = card.snippet(cfg, "me/adapter")
        args = "".join(snippet.call_args)
        assert (f"max_sequence_length={length.default // 2}," in args) == shown, args
        # the snippet's pipeline takes the argument, and its default is the one the kit compares with
        import inspect

        import diffusers

        parameter = inspect.signature(getattr(diffusers, snippet.pipeline).__call__).parameters["max_sequence_length"]
        assert parameter.default == length.default
        assert ("max_sequence_length" in args) == shown, args
        assert card.card_settings(cfg)["max_sequence_length"] == (length.default // 2 if shown else length.default)
