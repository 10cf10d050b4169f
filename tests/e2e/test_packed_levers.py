"""The levers of the families on Black Forest Labs' packed layout (FLUX.1, Chroma) on their tiny offline pipelines,
in the fewest runs per family: ``--blocks_to_swap`` over both block lists and ``--activation_offloading`` each write
the reference run's adapter bit for bit (and really ran; gradient checkpointing on: Chroma's hands its single blocks
the caption mask), and an ``fp8_scaled`` base skips a NaN update without a change and reloads into the unquantized
pipeline within the base's quantization error (Chroma's modulation network left in bf16). fp32 where bf16 is not the
point (bf16 matmuls are 10x slower on a CPU)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from helpers import train_in_process
from quantized_reload import assert_quantization_error_only, capture_steps, check_quantized_outputs, \
    skipped_without_change

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]
ADAPTER = "pytorch_lora_weights.safetensors"
RUN = dict(mixed_precision="no", train_batch_size=2, max_train_steps=3, checkpointing_steps=0,
           gradient_checkpointing="true")
#: per family: its run's caption length and what its log says of it (Chroma's --trim_text_padding cut; FLUX.1 has no
#: caption mask, so nothing is cut)
CAPTIONS = {"flux": (16, None), "chroma": (32, "caption tokens: the longest cached caption uses 16 of 32 padded tokens")}


@pytest.fixture(scope="module", params=sorted(CAPTIONS))
def family(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def model_and_data(family, tmp_path_factory):
    """The family's demo pipeline and 4 captioned 64 px shapes."""
    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.registry import get_spec

    root = tmp_path_factory.mktemp(f"{family}-levers")
    from dit_lora.config import TrainConfig

    get_spec(family).demo.build(TrainConfig.for_family(family, pretrained_model_name_or_path=str(root / "tiny")))
    return root / "tiny", make_shapes_dataset(root / "shapes", n=4, size=64)


def _run_options(family: str) -> dict:
    return dict(RUN, family=family, max_sequence_length=CAPTIONS[family][0])


@pytest.fixture(scope="module")
def reference(family, model_and_data, tmp_path_factory):
    """The plain run's adapter tensors."""
    summary, out = train_in_process(*model_and_data, tmp_path_factory.mktemp(f"{family}-reference"),
                                    **_run_options(family))
    assert isinstance(summary, dict), summary
    return load_file(str(out / ADAPTER))


@pytest.mark.parametrize("lever", [{"blocks_to_swap": 1}, {"activation_offloading": "true"}], ids=["swap", "offload"])
def test_a_memory_lever_changes_no_bit(family, model_and_data, reference, tmp_path, lever, capsys):
    summary, out = train_in_process(*model_and_data, tmp_path, **_run_options(family), **lever)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    said = capsys.readouterr().out
    if "blocks_to_swap" in lever:  # the last block of transformer_blocks and of single_transformer_blocks
        assert "block swap: 2 block(s)' frozen weights" in said, said[-3000:]
    else:
        assert "activation offloading" in said, said[-3000:]
    cut = CAPTIONS[family][1]
    assert (cut in said) if cut else "caption tokens:" not in said
    got = load_file(str(out / ADAPTER))
    assert got.keys() == reference.keys() and all(torch.equal(got[k], reference[k]) for k in got)


def test_an_fp8_scaled_base_skips_the_nan_and_reloads_unquantized(family, model_and_data, tmp_path):
    from dit_lora.kit.loader import model_class
    from dit_lora.registry import get_spec

    seen, on_step = capture_steps()
    summary, out = train_in_process(*model_and_data, tmp_path, on_step=on_step, quantize_base="fp8_scaled",
                                    **{**_run_options(family), "inject_faults": "nan_loss@2",
                                       "max_skipped_fraction": 0.5})
    check_quantized_outputs(summary, out, "fp8_scaled")
    skipped_without_change(seen, 2)
    model = seen["model"].eval()
    assert type(model.single_transformer_blocks[0].proj_mlp).__name__ == "Fp8ScaledLinear"
    if family == "chroma":  # kept out of quantization: every block's modulation
        assert type(model.distilled_guidance_layer.in_proj).__name__ == "Linear"
    pipeline = model_class("diffusers", get_spec(family).info.pipeline_class_name)
    pipe = pipeline.from_pretrained(model_and_data[0], torch_dtype=torch.float32)
    inputs = _inputs(family, model.config)
    trained_q = _run(model, inputs)
    model.disable_adapters()
    base_q = _run(model, inputs)
    base_unq = _run(pipe.transformer, inputs)
    pipe.load_lora_weights(out)
    assert_quantization_error_only(trained_q, _run(pipe.transformer, inputs), base_q, base_unq)


def _inputs(family: str, config) -> dict:
    """A 4 x 4 token grid, 8 caption tokens, two timesteps: what the pipeline gives the transformer (FLUX.1: CLIP's
    pooled embedding and guidance 1; Chroma: the boolean mask, the second caption 3 tokens long)."""
    from dit_lora.kit.packed import latent_ids

    g = torch.Generator().manual_seed(0)
    inputs = dict(hidden_states=torch.randn(2, 16, config.in_channels, generator=g),
                  encoder_hidden_states=torch.randn(2, 8, config.joint_attention_dim, generator=g),
                  timestep=torch.tensor([0.3, 0.8]), txt_ids=torch.zeros(8, 3),
                  img_ids=latent_ids(4, 4, "cpu", torch.float32), return_dict=False)
    if family == "flux":
        return dict(inputs, pooled_projections=torch.randn(2, config.pooled_projection_dim, generator=g),
                    guidance=torch.ones(2))
    from dit_lora.families.chroma.loss import transformer_mask

    caption_mask = torch.arange(8).expand(2, 8) <= torch.tensor([[7], [3]])
    return dict(inputs, attention_mask=transformer_mask(caption_mask, 16))


def _run(transformer, inputs) -> torch.Tensor:
    with torch.no_grad():
        return transformer(**inputs)[0].float()
