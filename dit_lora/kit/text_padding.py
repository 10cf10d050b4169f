"""The diffusers family kit's text-padding trim: once the latent cache is built, the caption length every batch is
cut to (the positions past the last token any cached caption attends to change nothing; the mechanism is
:mod:`dit_lora.data.text_padding`), said once when it cuts. A family's data component is a :class:`TrimmedTextData`
(the length recorded in its run state's ``text_tokens``) and its loss cuts each batch with
:func:`~dit_lora.data.text_padding.cut_text_padding`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dit_lora.contract.family import Components
from dit_lora.data.text_padding import used_text_length
from dit_lora.kit.components import DiffusionData, prepare_and_release

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig


def cached_text_length(
    data,
    padded: int,
    accelerator,
    *,
    mask_key: str = "prompt_attention_mask",
    enabled: bool = True,
    keep_flag: str | None = None,
) -> int | None:
    """The caption tokens any cached caption of ``data`` uses (None: not cached, ``enabled`` off, or no
    ``mask_key`` in the cache: nothing is cut); one line on the main process when it is shorter than ``padded``
    (``keep_flag``: the option that turns the cut off, named in that line)."""
    # The empty caption's entry (--caption_dropout_probability) and the held-out samples' (the validation loss)
    # are captions the batches may hold too.
    files = data.cache_entries()
    length = used_text_length(files, mask_key) if data.cached and enabled else None
    if length is not None and length < padded and accelerator.is_main_process:
        keeps = f": {keep_flag} false keeps it" if keep_flag else ""
        print(
            f"caption tokens: the longest cached caption uses {length} of {padded} padded tokens; every batch is "
            f"cut to them (the rest is masked in every sample{keeps})"
        )
    return length


class TrimmedTextData(DiffusionData):
    """``FamilySpec.data``: the standard image data, then (cached; the family's ``option`` on, where it has one) the
    caption length every batch is cut to, recorded in the run state's ``text_tokens``.

    ``length``: the run's padded caption length (``cfg.data`` -> tokens); ``state``: the run state of the components;
    ``mask_key``: the cached caption mask; ``option``: the family option that turns the cut off (None: always on).
    """

    def __init__(
        self,
        length: Callable[[DataOptions], int],
        state: Callable[[Components], Any],
        *,
        mask_key: str = "prompt_attention_mask",
        option: str | None = None,
    ) -> None:
        self.length, self.state, self.mask_key, self.option = length, state, mask_key, option

    def build_data(self, cfg: TrainConfig, spec, comps: Components, accelerator):
        """The data, and the caption tokens any cached caption uses (said once when it cuts)."""
        data = prepare_and_release(cfg, spec, comps, accelerator)
        enabled = bool(getattr(cfg.family_options, self.option)) if self.option else True
        self.state(comps).text_tokens = cached_text_length(
            data,
            self.length(cfg.data),
            accelerator,
            mask_key=self.mask_key,
            enabled=enabled,
            keep_flag=f"--{self.option}" if self.option else None,
        )
        return data
