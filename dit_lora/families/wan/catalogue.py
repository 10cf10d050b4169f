"""Wan's catalogue facts besides its entries: the text length, the I2V image processor, the training shift and the
trained sizes (``catalogue.json`` beside this module holds the entries and, under ``provenance``, where each fact
was checked).
"""

from __future__ import annotations

from typing import Any

from dit_lora.catalogue.files import catalogue_of

_FILE = catalogue_of(__package__)
ENTRIES = _FILE.entries
TEXT_LEN = 512
T2V, I2V = "wan", "wan_i2v"
#: image_processor/preprocessor_config.json of the 2.1 I2V repos (CLIP's 224 px crop and normalisation)
IMAGE_PROCESSOR_CONFIG: dict[str, Any] = _FILE.parts["image_processor_config"]

#: the training timestep shift each checkpoint is recommended (``--flow_shift``, a family option): DiffSynth-Studio
#: trains every Wan model with its "Wan" FlowMatchScheduler, whose shift defaults to 5
#: (``diffsynth/diffusion/flow_match.py`` ``set_timesteps_wan``; its A14B scripts' ``--max/min_timestep_boundary``
#: 0.417 is the 0.875 boundary under that shift). Others: the Wan team trains 480p at shift 2 and raises it for
#: 720p (Wan-Video/Wan2.1 issue 291); musubi-tuner's example uses 3.0 (docs/wan.md).
TRAINING_SHIFT = 5.0
TRAINING_SHIFT_SOURCE: str = _FILE.parts["training_shift_source"]


def default_size(expand_timesteps: bool) -> tuple[int, int, int, str]:
    """``(frames, height, width, why)`` a Wan run trains at without size flags (``WanInfo.trained_size``), listed in
    each entry's defaults so that ``dit-lora models`` shows it: TI2V-5B its one size; every other checkpoint 81 x
    480 x 832, its 480p size, also for the 14B and A14B ones trained up to 720 x 1280 (a quarter of the tokens per
    clip of 720p; the 480P and 720P I2V releases share every config, so a local copy cannot tell which it is)."""
    if expand_timesteps:
        return 121, 704, 1280, "Wan2.2 TI2V-5B generates 121 frames at 704x1280 (24 fps)"
    return 81, 480, 832, "Wan 2.1/2.2 generate 81 frames; 480x832 is the 480p size every Wan checkpoint runs at"
