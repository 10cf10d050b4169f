"""``dit-lora caption``: caption images and clips with the video LLMs dit-lora trains, before a LoRA run.

:mod:`.media` lists and decodes the files as training does, :mod:`.captioner` loads the model as its family trains
it (quantized loaders, a dit-lora adapter) and generates greedily in batches, :mod:`.writer` writes captions safely
(atomic files, a journal that a killed run resumes from), :mod:`.checks` looks over the captions at the end,
:mod:`.memory` says what the captioner takes on the device, :mod:`.run` strings them together.
"""
