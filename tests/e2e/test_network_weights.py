"""``--network_weights`` (issue 49): a run started from an existing adapter begins at that adapter's output, whatever
its own --lora_alpha, from a dit-lora/diffusers file, a PEFT folder (LoKr) or a ComfyUI-named file (Wan, converted by
diffusers); a file of another type, rank or set of layers is refused in one paragraph; the card and run_options.json
record it."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from conformance import adapted_layers_match
from helpers import train_in_process

#: the source run: 2 updates at alpha/rank 2 (its export folds the scale into lora_B)
SOURCE = dict(max_train_steps=2, rank=4, lora_alpha=8, lr_warmup_steps=0, learning_rate=1e-2)
#: the started run: its first update skipped by the guard drill, so after it the model is what it loaded; another
#: alpha (scale 3/4, not a power of two: the loaded factor is rescaled)
STARTED = dict(max_train_steps=2, rank=4, lora_alpha=3, lr_warmup_steps=0, inject_faults="nan_loss@1")


def _saved(state: dict) -> dict:
    """A saved adapter's tensors by the model's own names (no diffusers or PEFT prefix)."""
    return {k.removeprefix("transformer.").removeprefix("base_model.model."): v for k, v in state.items()}


def at_first_update(check):
    """An ``on_step`` that runs ``check(model, folded)`` once, after update 1: ``folded``, the adapter as its export
    would write it then (the run's scale folded in, saved names)."""
    from peft.utils import get_peft_model_state_dict

    from dit_lora.output.adapter import fold_lora_scale

    def on_step(step, model, optimizer):
        if step == 1:
            state = get_peft_model_state_dict(model, adapter_name="default")
            folded, _ = fold_lora_scale(state, model.peft_config["default"].to_dict())
            check(model, folded)
            on_step.checked = True

    on_step.checked = False
    return on_step


def _same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        torch.testing.assert_close(a[key].float(), b[key].float(), rtol=1e-6, atol=0)


@pytest.fixture(scope="module")
def source_run(tiny_sana, shapes_data, tmp_path_factory):
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path_factory.mktemp("source"), **SOURCE)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    return out


@pytest.mark.slow
def test_a_run_started_from_a_diffusers_file_begins_at_its_output(source_run, tiny_sana, shapes_data, tmp_path):
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    file = source_run / "pytorch_lora_weights.safetensors"
    # fp32 throughout: in bf16 the file's factor and the run's rescaled one round differently inside the layer
    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path=str(tiny_sana), mixed_precision="no")
    # the stock pipeline's load_lora_weights, in the dtypes the family loads it in: the file at its strength
    pipe = get_spec("sana").adapter.load_pipeline_with_adapter(cfg, source_run, torch.device("cpu"))

    def check(model, folded):
        assert adapted_layers_match(model, pipe.transformer) > 0  # layer for layer, the loaded adapter's output
        _same(folded, _saved(load_file(str(file))))  # and the file's tensors, once the run's alpha is folded back

    on_step = at_first_update(check)
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path, network_weights=file, on_step=on_step,
                                    mixed_precision="no", checkpointing_steps=2, **STARTED)
    assert isinstance(summary, dict) and summary["status"] == "completed" and on_step.checked, summary
    options = json.loads((out / "checkpoint-2" / "run_options.json").read_text())
    assert str(file) in json.dumps(options) and summary["config"]["network_weights"] == str(file)
    assert "| started from (--network_weights) | pytorch_lora_weights.safetensors |" in (out / "README.md").read_text()

    # a resume takes the adapter from its checkpoint: the file is not read again (here it has gone)
    moved = tmp_path / "moved.safetensors"
    file.rename(moved)
    try:
        resumed, _ = train_in_process(tiny_sana, shapes_data, tmp_path, network_weights=file, mixed_precision="no",
                                      checkpointing_steps=2, resume_from_checkpoint="latest",
                                      **{**STARTED, "max_train_steps": 3})
    finally:
        moved.rename(file)
    assert isinstance(resumed, dict) and resumed["steps_this_run"] == 1, resumed


@pytest.mark.slow
def test_a_lokr_run_continues_from_a_peft_folder(tiny_sana, shapes_data, tmp_path):
    lokr = dict(lora_type="lokr", lokr_factor=4)
    first, first_out = train_in_process(tiny_sana, shapes_data, tmp_path / "first", **SOURCE, **lokr)
    assert isinstance(first, dict) and first["status"] == "completed", first
    assert (first_out / "adapter_config.json").is_file()
    on_step = at_first_update(
        lambda model, folded: _same(folded, _saved(load_file(str(first_out / "adapter_model.safetensors")))))
    summary, _ = train_in_process(tiny_sana, shapes_data, tmp_path / "started", network_weights=first_out,
                                  on_step=on_step, **STARTED, **lokr)
    assert isinstance(summary, dict) and summary["status"] == "completed" and on_step.checked, summary


@pytest.mark.slow
@pytest.mark.parametrize("flags,needles", [
    (dict(rank=8), ["another shape", "Its rank is 4: set --rank to it."]),
    (dict(lora_type="loha"), ["is a lora adapter", "--lora_type lora"]),
    (dict(lora_layers="to_q"), ["adapts", "layer weight(s) this run does not", "to_k", "--lora_layers"]),
])
def test_a_file_that_does_not_fit_is_refused_in_one_paragraph(source_run, tiny_sana, shapes_data, tmp_path, flags,
                                                               needles):
    from dit_lora.core.errors import UserError

    err, _ = train_in_process(tiny_sana, shapes_data, tmp_path, network_weights=source_run,
                              **{**STARTED, **flags})
    assert isinstance(err, UserError), err
    assert all(n in str(err) for n in needles), str(err)
    assert "\n" not in str(err).strip()


@pytest.mark.slow
def test_a_pickle_or_missing_file_is_refused(tiny_sana, shapes_data, tmp_path):
    from dit_lora.core.errors import UserError

    pickled = tmp_path / "adapter.bin"
    pickled.write_bytes(b"not read")
    err, _ = train_in_process(tiny_sana, shapes_data, tmp_path / "run", network_weights=pickled, **STARTED)
    assert isinstance(err, UserError) and "safetensors only" in str(err), err


@pytest.mark.slow
def test_a_wan_run_starts_from_its_comfyui_file_as_from_its_diffusers_file(tmp_path):
    """The ComfyUI-named file dit-lora writes beside a Wan adapter, read back through diffusers' own converter
    (``WanPipeline.lora_state_dict``), starts a run where the diffusers file does."""
    from dit_lora.data.synthetic.clips import make_moving_square_dataset
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    model = build_tiny_wan_pipeline(tmp_path / "wan", variant="2.1-t2v")
    clips = make_moving_square_dataset(tmp_path / "clips", n=4, num_frames=9, fps=16, seed=3)
    video = dict(family="wan", resolution=None, center_crop=None, height=64, width=64, max_num_frames=9,
                 train_batch_size=2)
    first, out = train_in_process(model, clips, tmp_path / "first", **video, **SOURCE)
    assert isinstance(first, dict) and first["status"] == "completed", first
    comfy = out / "pytorch_lora_weights_comfyui.safetensors"
    assert comfy.is_file() and all(k.startswith("diffusion_model.") for k in load_file(str(comfy)))
    on_step = at_first_update(
        lambda model, folded: _same(folded, _saved(load_file(str(out / "pytorch_lora_weights.safetensors")))))
    summary, _ = train_in_process(model, clips, tmp_path / "started", network_weights=comfy, on_step=on_step,
                                  **video, **STARTED)
    assert isinstance(summary, dict) and summary["status"] == "completed" and on_step.checked, summary
