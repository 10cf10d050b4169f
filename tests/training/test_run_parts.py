"""training/run_parts.py: what the stages share; :meth:`Run.load_batch` gives the family each batch (and prior
preservation's class images) with the update's number as a host int."""

from __future__ import annotations

from dit_lora.training.run_parts import Run


def test_load_batch_gives_the_family_the_update_number_as_a_host_int():
    """``batch["step"]``: the loop and a fault replay both go through load_batch, so a family choosing per step
    (Wan A14B's alternating experts) sees the same number in both, and nothing is read from the device."""
    from types import SimpleNamespace

    import torch


    class Family:
        def prepare_batch(self, comps, batch, device, cached):
            return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    fake = SimpleNamespace(spec=SimpleNamespace(loss=Family()), comps=None, accelerator=SimpleNamespace(device=torch.device("cpu")),
                           data=SimpleNamespace(cached=True), hooks=SimpleNamespace(injector=None))
    for step in (1, 2, 7):
        out = Run.load_batch(fake, {"latents": torch.zeros(2, 3), "sample_index": [0, 1]}, step)
        assert out["step"] == step and type(out["step"]) is int
        assert out["latents"].shape == (2, 3)


def test_a_paired_batch_is_prepared_twice_with_one_step_number():
    """Prior preservation's class images go through the family's prepare_batch as the instance images do, with the
    same update number (Wan A14B picks its expert by it)."""
    from types import SimpleNamespace

    from dit_lora.data.batches import PRIOR

    prepared = []

    def prepare_batch(comps, batch, device, cached):
        prepared.append(sorted(batch))
        return {**batch, "on": device}

    fake = SimpleNamespace(spec=SimpleNamespace(loss=SimpleNamespace(prepare_batch=prepare_batch)), comps=None,
                           accelerator=SimpleNamespace(device="cpu"), data=SimpleNamespace(cached=True),
                           hooks=SimpleNamespace(injector=None))
    out = Run.load_batch(fake, {"x": 1, PRIOR: {"y": 2}}, 7)
    assert prepared == [["x"], ["y"]] and out["step"] == out[PRIOR]["step"] == 7 and out[PRIOR]["on"] == "cpu"


def test_the_validation_samples_take_their_recorded_sizes():
    from dit_lora.config import TrainConfig
    from dit_lora.training.run_parts import RunRecord, RunState

    cfg = TrainConfig.for_family("sana", resolution=512)
    assert RunRecord(started=0.0).sample_config(cfg) is cfg  # no sizes of their own: the run's config as it is
    sized = RunRecord(started=0.0, sample_sizes={"resolution": 1024}).sample_config(cfg)
    assert sized.data.resolution == 1024 and cfg.data.resolution == 512
    assert RunState().global_step == 0 and RunState().loss_history == []
