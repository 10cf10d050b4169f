"""families/flux2/spec.py: what FLUX.2's spec declares."""

from __future__ import annotations

from dit_lora.families.flux2.spec import INFO, flux2_spec


def test_info_and_components():
    spec = flux2_spec()
    assert spec.name == "flux2" and spec.info is INFO
    assert INFO.pipeline_classes == ("Flux2Pipeline", "Flux2KleinPipeline")
    assert INFO.block_lists == ("transformer_blocks", "single_transformer_blocks")  # block swap, FSDP2: both lists
    assert spec.samples.encoders is spec.encoders and spec.plan.loss is spec.loss
