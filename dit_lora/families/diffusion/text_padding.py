"""The diffusers family kit's text-padding trim: once the latent cache is built, the caption length every batch is
cut to (the positions past the last token any cached caption attends to change nothing; the mechanism is
:mod:`dit_lora.data.text_padding`), said once when it cuts. A family records the length in its run state and its
loss cuts each batch with :func:`~dit_lora.data.text_padding.cut_text_padding`."""

from __future__ import annotations

from dit_lora.data.text_padding import used_text_length


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
