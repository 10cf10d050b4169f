"""No training step waits for the device: the audit itself, and the runs that are not a family's plain demo.

``DIT_LORA_SYNC_DEBUG=1`` makes any host sync inside a micro-batch raise (on a CPU: reading a device
tensor's value with ``.item()``/``float``/``bool``, ``.tolist()``, ``.numpy()``, ``.cpu()``, ``nonzero`` and
the like, and copies between host data and device tensors; see ``dit_lora.training.sync_audit``). Every family's
demo config trains under it in the conformance suite (tests/conformance: default flags, a kernel check step, a
skipped step; its model card and the guides' blocks run there too). Here: the unit tests proving each kind of read
is refused and that the documented exceptions are the only ones, the Sana demo on mixed-aspect buckets with caption
dropout and a validation loss, a planted host read failing the run, and Qwen2.5-VL (no demo config of its own), whose
steps sync only inside transformers' vision tower.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from helpers import ROOT
from dit_lora.training.sync_audit import HostSyncError, SyncAudit

CONFIGS = ROOT / "recipes" / "configs"


def _demos() -> dict[str, tuple[str, str]]:
    """Every registered family's demo configs (its registry entry's ``demo_configs``) -> (model folder, data path
    inside the demo folder), both as the config names them under ``.dit_lora_demo/``."""
    from dit_lora.registry import entries

    found = {}
    for entry in entries():
        for config in entry.demo_configs:
            values = yaml.safe_load((CONFIGS / config).read_text())
            data = Path(values["train_data_dir"]).relative_to(".dit_lora_demo").as_posix()
            found[config] = (Path(values["pretrained_model_name_or_path"]).name, data)
    return found


DEMOS = _demos()  # config -> (model folder, data path inside the demo folder)
#: the video-LLM demo config trained as Qwen2.5-VL (a family with no demo config of its own)
QWEN = ("videollm/demo.yaml:qwen2_5_vl", ("tiny-qwen2.5-vl", "qa-clips-qwen/chat.jsonl"))


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("demo-assets")


@pytest.fixture
def audits(monkeypatch) -> list:
    """The SyncAudit of each run started in the test (to count what it saw)."""
    from dit_lora.training import drills as hooks

    made = []

    class Recorded(SyncAudit):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(hooks, "SyncAudit", Recorded)
    return made


def _train(config: str, root: Path, out: Path, monkeypatch, **extra):
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.training.loop import train

    model, data = dict([QWEN], **DEMOS)[config]
    config, _, family = config.partition(":")
    args = ["--config", str(ROOT / "recipes" / "configs" / config), "--pretrained_model_name_or_path", str(root / model),
            "--train_data_dir", str(root / data), "--output_dir", str(out),
            "--max_train_steps", "6", "--checkpointing_steps", "0", "--report_to", "none", "--validation_steps", "1000",
            "--validation_prompt", "", "--skip_doctor", "true"]  # no samples: they are not steps (each demo's own
    # test samples; the audit is of the training steps only)
    if family:
        args += ["--family", family]
    if not config.startswith("videollm/"):  # a video LLM reads no latent cache: --cache_dir is refused for it
        args += ["--cache_dir", str(root / "cache")]
    if "max_train_steps" in extra:
        args[args.index("--max_train_steps") + 1] = str(extra.pop("max_train_steps"))
    for k, v in extra.items():
        args += [f"--{k}", str(v)]
    monkeypatch.setenv("DIT_LORA_SYNC_DEBUG", "1")
    AcceleratorState._reset_state(True)
    try:
        return train(parse_config(args))
    finally:
        AcceleratorState._reset_state(True)


def test_the_audit_catches_a_sync_on_the_cpu():
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    x = torch.ones(3)
    with audit.step():
        y = x * 2  # device work is fine
        with audit.allowed():
            assert float(y.sum()) == 6.0  # a documented check step
        for read in (lambda: y.sum().item(), lambda: bool(y[0] > 1), lambda: y.nonzero()):
            with pytest.raises(HostSyncError, match="host sync inside the training step"):
                read()


def test_a_compiled_graph_runs_under_the_audit_only_as_a_compiled_region_of_device_tensors():
    """Dynamo does not compile under the audit's Python modes (torchao's low-bit AdamW update is a fullgraph graph):
    compiled_region steps them aside for the call, counted, after refusing a host tensor among its inputs and a
    Dynamo that would capture .item() into the graph; the watchers are back after it."""
    import torch._dynamo.config as dynamo_config

    from dit_lora.training.sync_audit import compiled_region

    # two functions (code objects): dynamo does not try again a function it skipped under the modes
    skipped = torch.compile(lambda x, y: (x * 2 + y).sum(), fullgraph=True, backend="eager")
    graph = torch.compile(lambda x, y: (x * 3 + y).sum(), fullgraph=True, backend="eager")
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    x = torch.ones(3)
    with audit.step():
        y = torch.zeros(3, device=x.device)
        with pytest.raises(RuntimeError, match="no compiled frames"):
            skipped(x, y)
        with compiled_region(x, y):
            assert graph(x, y).numel() == 1
        host = torch.zeros(3)  # made in the step without a device: a GPU run's host tensor
        with pytest.raises(HostSyncError, match="host tensor into a compiled region"), compiled_region(x, host):
            pass
        # dynamo's own patch: pytest's monkeypatch would delete the option on undo (torch's config hides it)
        with dynamo_config.patch(capture_scalar_outputs=True):
            with pytest.raises(HostSyncError, match="may capture .item()"), compiled_region(x, y):
                pass
        with pytest.raises(HostSyncError):
            x.sum().item()
    assert audit.compiled == 1 and not audit.passed
    with compiled_region(x, host):  # no audit running: nothing to step aside
        pass


def _toy_step():
    """A model's forward and backward as a step runs them: (loss, a parameter, the host batch)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return model, torch.randn(5, 4)


# Every way a step could hand a device tensor's values to the host; each must be refused.
HOST_READS = {
    "item": lambda loss, param: loss.item(),
    "float": lambda loss, param: float(loss),
    "bool": lambda loss, param: bool(loss > 0),
    "tolist": lambda loss, param: loss.detach().tolist(),
    "cpu": lambda loss, param: loss.detach().cpu(),
    "numpy": lambda loss, param: loss.detach().numpy(),
    "np.asarray": lambda loss, param: np.asarray(loss.detach()),
    "parameter.tolist": lambda loss, param: param.tolist(),
    "grad.cpu": lambda loss, param: param.grad.cpu(),
}


@pytest.mark.parametrize("read", sorted(HOST_READS))
def test_every_host_read_in_a_step_is_refused(read):
    """.item()/float/bool (dispatcher: _local_scalar_dense) and .tolist()/.cpu()/.numpy() (no dispatcher op on a
    CPU: the function mode) of what the step produced, or of a parameter, raise; the loader's host batch does not."""
    model, batch = _toy_step()
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    with audit.step():
        with audit.batch_transfer({"x": batch}):
            assert batch.tolist() and batch.cpu() is batch and batch.numpy().shape == (5, 4)  # host data: no sync
            batch = batch.to(torch.device("cpu"))  # onto the device: from here on a device tensor
        with pytest.raises(HostSyncError):
            batch.tolist()
        step_count = torch.tensor(0.0)  # no device named: a host tensor, as PyTorch's optimizers keep step counts
        step_count += 1
        assert step_count.item() == 1.0 and step_count.tolist() == 1.0
        loss = model(batch).pow(2).mean()
        loss.backward()
        param = model[0].weight
        loss.detach().to(torch.device("cpu"), torch.float64)  # .to(the training device) on a CPU: no host read
        with pytest.raises(HostSyncError, match="host sync inside the training step") as err:
            HOST_READS[read](loss, param)
        with audit.allowed():  # the same read at a documented check step passes, and is counted
            HOST_READS[read](loss, param)
    assert "test_no_host_sync.py" in str(err.value)  # the message says where
    assert sum(audit.passed.values()) == 1, audit.passed
    HOST_READS[read](loss, param)  # outside the step: no audit


def test_host_device_crossing_copies_are_refused_except_the_batch_transfer():
    """On a CPU there is one device, so 'meta' stands in for an accelerator: a CPU tensor copied to it (a host
    constant moved every step) or copied back is refused; the batch's move onto the device is the exception."""
    audit = SyncAudit(torch.device("meta"), enabled=True)
    host = torch.arange(4.0)
    device_buf = torch.empty(4, device="meta")
    with audit.step():
        device_buf.add_(1.0)  # device work is fine
        for copy in (lambda: host.to("meta"), lambda: device_buf.copy_(host), lambda: device_buf.to("cpu"),
                     lambda: host.new_empty(4).copy_(device_buf)):
            with pytest.raises(HostSyncError, match="host -> device|device -> host"):
                copy()
        with audit.batch_transfer():
            assert host.to("meta").device.type == "meta"  # the loader's batch onto the device
            with pytest.raises(HostSyncError, match="device -> host"):
                device_buf.to("cpu")  # only host-to-device passes there
        for read in (lambda: device_buf.tolist(), lambda: device_buf.cpu()):  # non-CPU device: by device type
            with pytest.raises(HostSyncError):
                read()
        assert host.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert audit.passed == {"aten::_to_copy host -> device": 1}


def test_on_a_cpu_copies_between_host_data_and_step_tensors_are_refused():
    """On a CPU the audit keeps which tensors a GPU run holds on the host: copy_ between them and step tensors
    is the host-device copy it would be on a GPU."""
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    model, batch = _toy_step()
    with audit.step():
        loss = model(batch).pow(2).mean()
        table = torch.tensor([1.0, 2.0])  # a host constant built in the step
        with pytest.raises(HostSyncError, match="copy_ host -> device"):
            loss.detach().reshape(1).clone().copy_(table[:1])
        with pytest.raises(HostSyncError, match="copy_ device -> host"):
            table[:1].copy_(loss.detach().reshape(1))
        on_device = torch.tensor([1.0, 2.0], device=torch.device("cpu"))  # names the device: a device tensor
        with pytest.raises(HostSyncError, match="tolist"):
            on_device.tolist()


def test_the_non_fused_optimizer_read_is_the_one_documented_exception():
    """guard.optimizer_step's single read per step for non-fused optimizers passes the audit (deliberate()),
    counted once per step; the same read anywhere else in a step is refused."""
    from dit_lora.training.guard import StepGuard

    model, batch = _toy_step()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False, fused=False)
    guard = StepGuard(opt, [lambda k: 1.0], 8, torch.device("cpu"), enabled=True, fused=False, interval=4,
                      max_consecutive_skips=8, rollback_lr_factor=0.5, max_rollbacks=1, spike_sigma=None, world_size=1)
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    for step in range(3):
        with audit.step():
            loss = model(batch).pow(2).mean()
            loss.backward()
            norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            guard.step(opt, opt, loss, norm, step)
            opt.zero_grad(set_to_none=True)
    assert audit.passed == {"Tensor.tolist()": 3}, audit.passed
    with audit.step(), pytest.raises(HostSyncError):
        torch.stack([guard.counts[0], guard.counts[1]]).tolist()


@pytest.mark.slow
def test_mixed_aspect_buckets_and_caption_dropout_steps_never_sync(demo_root, tmp_path, monkeypatch, audits,
                                                                  mixed_aspect_data):
    """Images of six aspect ratios in their buckets (batches of several shapes, chosen on the host) with
    --caption_dropout_probability (the drop decided on the host, the empty caption swapped in the dataset) and the
    held-out validation loss between the steps (its host read is outside them): the Sana demo's steps still never wait
    for the device. One run for all three (they share the suite's time)."""
    summary = _train("sana/demo.yaml", demo_root, tmp_path / "out", monkeypatch, train_data_dir=mixed_aspect_data,
                     train_batch_size=2, caption_dropout_probability=0.5, validation_split=0.2, validation_steps=2)
    assert [step for step, _ in summary["validation_loss"]["evaluations"]] == [0, 2, 4, 6]
    assert summary["status"] == "completed" and summary["steps"] == 6 and summary["config"]["aspect_buckets"] == "auto"
    assert summary["config"]["train_data_dir"] == str(mixed_aspect_data)
    assert summary["config"]["caption_dropout_probability"] == 0.5
    (audit,) = audits
    assert audit.enabled and audit.steps == 6 * summary["config"]["gradient_accumulation_steps"]
    assert set(audit.passed_in) <= {1}, audit.passed_in


@pytest.mark.slow
def test_a_host_read_added_to_a_family_step_fails_the_run(demo_root, tmp_path, monkeypatch, audits):
    """The loop really runs each step under the audit: a .tolist() of the loss in Sana's compute_loss (no
    dispatcher op on a CPU, so the old audit missed it) ends the run at the first step."""
    from torch._subclasses.fake_tensor import FakeTensor

    from dit_lora.families.sana.loss import SanaLoss

    original = SanaLoss.compute_loss

    def leaky(self, comps, model, batch, generator, cfg):
        loss = original(self, comps, model, batch, generator, cfg)
        if not isinstance(loss, FakeTensor):  # a memory plan may trace the step on fake tensors first
            loss.detach().tolist()  # e.g. for a log line
        return loss

    monkeypatch.setattr(SanaLoss, "compute_loss", leaky)
    with pytest.raises(HostSyncError, match=r"Tensor.tolist\(\)") as err:
        _train("sana/demo.yaml", demo_root, tmp_path / "out", monkeypatch, max_train_steps=1)
    assert "in leaky" in str(err.value) and audits[0].steps == 1


@pytest.mark.slow
def test_qwen2_5_vl_syncs_only_inside_transformers_vision_tower(demo_root, tmp_path, monkeypatch):
    """Known upstream limit: transformers' Qwen2.5-VL vision tower derives its sequence lengths from
    ``video_grid_thw`` on the host (``repeat_interleave``, ``tolist``) in every forward. The first sync
    of a step must come from there, not from dit-lora or the language model."""
    with pytest.raises(RuntimeError) as err:  # HostSyncError on a CPU, torch's own error on CUDA
        _train(QWEN[0], demo_root, tmp_path / "out", monkeypatch)
    frames = [str(entry.path) for entry in err.traceback]
    assert any("qwen2_5_vl" in f or "vision_utils" in f for f in frames), frames
    innermost_ours = [f for f in frames if "dit_lora" in f and "sync_audit" not in f][-1]
    assert innermost_ours.endswith(("liger.py", "videochat.py")), frames  # dit-lora only called the model
