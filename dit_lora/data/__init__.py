"""Training data: find samples (:mod:`.sources`) and turn images into tensors (:mod:`.transforms`)."""

from dit_lora.data.sources import IMAGE_EXTENSIONS, RawSample, load_samples
from dit_lora.data.transforms import crop_box, crop_seed, flip_decision, preprocess_image, resized_size
from dit_lora.data.validation import validate_samples

__all__ = [
    "IMAGE_EXTENSIONS",
    "RawSample",
    "crop_box",
    "crop_seed",
    "flip_decision",
    "load_samples",
    "preprocess_image",
    "resized_size",
    "validate_samples",
]
