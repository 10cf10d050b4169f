"""Helpers the benchmark scripts share (not benchmarks themselves).

``gpu_step``: the timed LoRA train step, memory figures and result files of the GPU benchmarks.
``step_timer``: runs a training script unmodified and timestamps each update of its step progress (a diffusers
example's tqdm bar, dit-lora's ``Progress``: a bar or plain lines).
``cpu_harness``: one timed child run of a CPU benchmark, its environment, the machine's state and load.
"""
